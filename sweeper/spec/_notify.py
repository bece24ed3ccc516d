"""The sweep file's `notify` section: the webhooks a sweep posts its events to (their
delivery is `sweeper.notify`'s), and `notify_problems`: the url_env variables that the
environment lacks. A webhook's URL is a secret: given in the file (`url`, kept as a
`WebhookUrl`, so that every dump and pickle of the spec, the sweep folder's sweep.yaml,
Tune's saved state and MLflow's params and artifact included, holds `WITHHELD` instead),
or named by an environment variable (`url_env`), read when the sweep starts or resumes."""

from __future__ import annotations

import typing
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from trainables.errors import FieldProblems
from trainables.sections import StrictModel

__all__ = ["NOTIFY_EVENTS", "NotifySpec", "WITHHELD", "WebhookSpec", "WebhookUrl", "notify_problems", "url_problem"]

NotifyEvent = Literal["started", "new_best", "trial_failed", "budget_cap", "finished", "failed", "stopped"]
NOTIFY_EVENTS: tuple[str, ...] = typing.get_args(NotifyEvent)

# What pydantic writes for a SecretStr in every dump: a spec read back from its sweep.yaml
# or MLflow holds it in place of a literal url (the webhook is then left out, with a note).
WITHHELD = "**********"


class WebhookUrl(SecretStr):
    """A webhook's URL: a SecretStr (masked in every dump, repr and str) that also pickles
    as WITHHELD, since Tune saves its callbacks (the tracker holds the spec) in the sweep's
    folder and Ray ships what it runs elsewhere by pickling. Copies are the same value."""

    def __reduce__(self):
        return type(self), (WITHHELD,)

    def __copy__(self) -> "WebhookUrl":
        return self

    def __deepcopy__(self, memo: dict) -> "WebhookUrl":
        return self


def url_problem(url: str) -> str | None:
    """What is wrong with a webhook URL, without quoting it (it is a secret), or None."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        scheme = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        return f"must be an http:// or https:// URL, got {scheme} (the URL itself is not shown: it is a secret)"
    if not parts.hostname:
        return "must name a host (https://HOST/PATH), got none"
    return None


class WebhookSpec(StrictModel):
    url: WebhookUrl | None = Field(
        None,
        description="The webhook's http(s) URL, e.g. a Slack incoming webhook. A secret: never printed or logged, "
        "and stored masked with the sweep (a resumed sweep cannot post to it: prefer url_env).",
    )
    url_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The environment variable holding the URL (e.g. SLACK_WEBHOOK), read when the sweep starts "
        "or resumes; give url or url_env.",
    )
    events: list[NotifyEvent] = Field(
        default_factory=lambda: list(NOTIFY_EVENTS),
        min_length=1,
        description="What to post: started, new_best (a completed trial is the best so far), trial_failed, "
        "budget_cap (a budget cap stopped or cut the sweep), finished (the best trial, its metric, the cost), "
        "failed and stopped (the line the terminal showed and how to resume); default: all.",
    )

    @model_validator(mode="after")
    def _one_url(self) -> "WebhookSpec":
        if (self.url is None) == (self.url_env is None):
            raise FieldProblems([("url", "give the URL in url or the name of an environment variable holding it "
                                         "in url_env (one of them)")])
        literal = self.url.get_secret_value() if self.url is not None else WITHHELD
        problem = None if literal == WITHHELD else url_problem(literal)
        if problem:
            raise FieldProblems([("url", problem)])
        return self


class NotifySpec(StrictModel):
    webhooks: list[WebhookSpec] = Field(
        min_length=1,
        description="Where the sweep posts its events: [{url_env: SLACK_WEBHOOK, events: [finished, failed]}, ...]. "
        "Each gets a JSON object with `text` (what Slack and most chat tools show), `event`, `sweep` and the "
        "event's fields (docs/guides/notifications.md).",
    )
    timeout_seconds: float = Field(
        5.0, gt=0, le=60,
        description="How long one post may take; also how long the sweep waits at its end for posts still "
        "under way (not at all for a webhook whose last post got no answer), before it names those not delivered.",
    )
    attempts: int = Field(
        3, ge=1, le=10,
        description="Tries of each post: after a timeout, a refused connection, a 5xx or a 429 answer it is tried "
        "again (0.5 s later, then twice as long each time).",
    )


def notify_problems(notify: NotifySpec | None, environ) -> list[tuple[str, str]]:
    """(key, message) for each webhook whose url_env names a variable that `environ` does not
    hold, or that holds no http(s) URL; the URL is never quoted."""
    problems = []
    for index, hook in enumerate(notify.webhooks if notify is not None else []):
        if hook.url_env is None:
            continue
        url = environ.get(hook.url_env, "").strip()
        problem = url_problem(url) if url else None
        if not url:
            problems.append((f"notify.webhooks.{index}.url_env", f"the environment variable {hook.url_env} is not "
                             "set or is empty; export it with the webhook's URL, or remove this webhook"))
        elif problem:
            problems.append((f"notify.webhooks.{index}.url_env", f"the URL in {hook.url_env} {problem}"))
    return problems
