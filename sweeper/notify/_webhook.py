"""One webhook's posts, in the background: `WebhookSender` posts each message as JSON from a
daemon thread of its own, in order, each try bounded by a timeout and tried again after a
timeout, a refused connection, a 5xx or a 429 answer. The sweep's thread only queues a
message; a webhook that is down, refuses or hangs holds up its own thread and nothing
else. `close` waits for what is queued until a deadline (not at all for a webhook whose
last post got no answer, timed out or refused: one known to be down must not hold the
sweep's end) and returns what was not delivered, each message as (event, why). No text it returns holds the URL (a secret): a webhook is named by its key."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field

__all__ = ["Webhook", "WebhookSender", "post_json"]

# Messages queued for one webhook at most; more are dropped (and named as not delivered):
# a webhook down for hours must not grow the driver's memory.
MAX_QUEUED = 1000
# Seconds before the second try; each further try waits twice as long.
FIRST_RETRY_S = 0.5


@dataclass(frozen=True)
class Webhook:
    """A webhook of the sweep's notify section, its URL resolved."""

    key: str  # notify.webhooks.N, with (url_env NAME) where the URL came from a variable
    url: str = field(repr=False)
    events: frozenset[str]


def post_json(url: str, payload: dict, timeout_s: float) -> None:
    """POST `payload` as JSON to `url`; raises for anything but a 2xx answer within `timeout_s`
    (on each of connecting, sending and reading)."""
    request = urllib.request.Request(
        url, data=json.dumps(payload, default=str).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "sweeper"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read(65536)


def _why(exc: BaseException, timeout_s: float) -> str:
    """Why a try failed, in words that never quote the URL (an exception's text may)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"answered {exc.code} {exc.reason}"
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return type(reason).__name__


class WebhookSender:
    """Posts one webhook's messages from a daemon thread; see the module docstring."""

    def __init__(self, webhook: Webhook, timeout_s: float, attempts: int, post=post_json):
        self.webhook, self.timeout_s, self.attempts, self.post = webhook, timeout_s, attempts, post
        self.delivered: list[str] = []  # the events posted, in order
        self.failed: list[tuple[str, str]] = []  # (event, why) of each message not delivered
        self._queue: deque[tuple[str, dict]] = deque()
        self._in_flight: str | None = None
        self._down = False  # its last post got no answer at all (timed out, refused)
        self._lock = threading.Condition()
        self._closing = False  # no more messages: the thread ends once the queue is empty
        self._abandoned = threading.Event()  # the deadline passed: the thread stops at once
        self._thread = threading.Thread(target=self._run, name=f"notify {webhook.key}", daemon=True)
        self._thread.start()

    def send(self, event: str, payload: dict) -> None:
        """Queue `payload` (a message of `event`); returns at once."""
        with self._lock:
            if self._closing:
                return
            if len(self._queue) >= MAX_QUEUED:
                self.failed.append((event, f"dropped: {MAX_QUEUED} posts were waiting"))
                return
            self._queue.append((event, payload))
            self._lock.notify()

    def close(self, deadline: float) -> list[tuple[str, str]]:
        """Wait until every queued message was tried or `deadline` (time.monotonic()) passed,
        or not at all where the last post got no answer; the messages not delivered, as (event, why)."""
        with self._lock:
            self._closing = True
            self._lock.notify()
            wait_s = 0.0 if self._down else max(0.0, deadline - time.monotonic())
        self._thread.join(wait_s)
        with self._lock:
            self._abandoned.set()
            left = ([self._in_flight] if self._in_flight else []) + [event for event, _ in self._queue]
            self._queue.clear()
            return [*self.failed, *((event, "not sent before the sweep ended") for event in left)]

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._lock.wait()
                if not self._queue or self._abandoned.is_set():
                    return
                event, payload = self._queue.popleft()
                self._in_flight = event
            failure = self._deliver(payload)
            with self._lock:
                if self._abandoned.is_set():
                    return  # close() counted it as not sent
                self._in_flight = None
                if failure is None:
                    self.delivered.append(event)
                else:
                    self.failed.append((event, failure))

    def _deliver(self, payload: dict) -> str | None:
        """Post `payload`, trying again as the module docstring says; None once delivered,
        else why the last try failed."""
        why = "not tried"
        for attempt in range(self.attempts):
            if attempt and self._abandoned.wait(FIRST_RETRY_S * 2 ** (attempt - 1)):
                break
            try:
                self.post(self.webhook.url, payload, self.timeout_s)
                self._down = False
                return None
            except urllib.error.HTTPError as exc:
                self._down = False
                why = _why(exc, self.timeout_s)
                if 400 <= exc.code < 500 and exc.code != 429:
                    return why
            except Exception as exc:  # noqa: BLE001 - any failure of a post is the webhook's, never the sweep's
                self._down = True
                why = _why(exc, self.timeout_s)
        tries = f"{self.attempts} tries" if self.attempts > 1 else "1 try"
        return f"{why}; {tries}"
