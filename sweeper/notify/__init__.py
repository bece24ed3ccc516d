"""Notifications: the sweep's events (started, a new best trial, a trial failed, a budget
cap, finished, failed, stopped) posted as JSON to the webhooks of its `notify` section, in
the background, so that a webhook that is down or slow never slows or stops the sweep
(`Notifier`, one of the driver's listeners); the webhooks' URLs read from the spec or the
environment (`resolve_webhooks`), never printed, logged or stored.

The private modules: `_notifier` (the events and their messages), `_webhook` (one
webhook's posts from a thread of its own, with a timeout and tries again).
"""

from sweeper._lazy import lazy_getattr

__all__ = ["Notifier", "resolve_webhooks", "Webhook", "WebhookSender"]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "Notifier": "_notifier", "resolve_webhooks": "_notifier",
    "Webhook": "_webhook", "WebhookSender": "_webhook",
}

__getattr__ = lazy_getattr(__name__, _HOME)
