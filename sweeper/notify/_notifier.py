"""The sweep's events, posted to the webhooks of its `notify` section: `Notifier` is one of the
driver's listeners (sweeper/run/_driver.py), and the launch tells it the sweep started and
how it ended. Each message is a JSON object: `text` (one line that Slack and most chat tools
show), `event`, `sweep`, `time` (UTC, ISO 8601) and the event's own fields:

- started: `trials` (what runs, as the terminal says it), `resumed`;
- new_best: a completed trial is the best so far: `trial`, `metric`, `value`, `params`;
- trial_failed: `trial`, `error`;
- budget_cap: a cap stopped or cut the sweep: `line` (what the summary says of it);
- finished: `best_trial`, `metric`, `value`, `params`, `usd`, `accelerator_hours`,
  `wall_seconds`, `trials`, `completed`, `pruned`, `failed`;
- failed and stopped: `line` (what the terminal showed), `resume` (the command that
  continues the sweep, or null where there is nothing to continue).

Posting is `_webhook.WebhookSender`'s, in the background; at the end the notifier waits
at most `notify.timeout_seconds` (not at all for a webhook whose last post got no answer)
and says in one line which messages were not delivered.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Callable

from sweeper.errors import UserError
from sweeper.names import TrialState
from sweeper.notify._webhook import Webhook, WebhookSender
from sweeper.spec import NotifySpec, WITHHELD, notify_problems
from sweeper.track import how_it_ended
from sweeper.views import usd

__all__ = ["Notifier", "resolve_webhooks"]


def resolve_webhooks(notify: NotifySpec | None, environ) -> tuple[list[Webhook], list[str]]:
    """The webhooks to post to, each URL read from the spec or from `environ`, and a note for
    each one left out because its literal URL was withheld from a stored spec (a resumed
    sweep's). UserError with a keyed line for each variable missing."""
    problems = notify_problems(notify, environ)
    if problems:
        raise UserError(*(f"{key}: {message}" for key, message in problems))
    webhooks, notes = [], []
    for index, hook in enumerate(notify.webhooks if notify is not None else []):
        key = f"notify.webhooks.{index}"
        if hook.url_env is not None:
            url = environ[hook.url_env].strip()
            webhooks.append(Webhook(f"{key} (url_env {hook.url_env})", url, frozenset(hook.events)))
        elif hook.url.get_secret_value() == WITHHELD:
            notes.append(f"{key}: not notified: its url is a secret, not stored with the sweep; give the URL in an "
                         "environment variable (url_env) for a sweep that is resumed")
        else:
            webhooks.append(Webhook(key, hook.url.get_secret_value(), frozenset(hook.events)))
    return webhooks, notes


class Notifier:
    """The driver's listener that posts the sweep's events (see the module docstring).
    `cap_line(ended)` is the budget's line once a cap stopped or cut the sweep, else None."""

    def __init__(self, name: str, book, webhooks: list[Webhook], notify: NotifySpec | None,
                 cap_line: Callable[[bool], str | None]):
        self.name, self.book, self.cap_line = name, book, cap_line
        self.wait_s = notify.timeout_seconds if notify is not None else 0.0
        self.senders = [WebhookSender(hook, notify.timeout_seconds, notify.attempts) for hook in webhooks]
        self.best: tuple[str, float] | None = None  # (trial id, value) of the best trial last told
        self.cap_told = False

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state: the senders hold the URLs
        # (secrets) and their threads, and stay with this process.
        return {**self.__dict__, "senders": [], "cap_line": None}

    # ------------------------------------------------------------ the launch's events

    def sweep_started(self, trials: str, resumed: bool) -> None:
        """The sweep starts (or resumes: the best trial so far is not news)."""
        self.best = self._best_now()
        verb = "resumed" if resumed else "started"
        self._post("started", f"Sweep {self.name!r} {verb}: {trials}", trials=trials, resumed=resumed)

    def sweep_ended(self, run) -> None:
        """The sweep's tuner returned (`run`: its SweepRun): the cap that cut it, how it ended;
        then the wait for what is still posting, and the line naming what was not delivered
        in the run's notes (the summary prints them)."""
        self._tell_cap(ended=True)
        ended, line = how_it_ended(run)
        if ended != "finished":
            resume = f"sweep resume {self.name}" if run.interrupted else None
            # "Sweep stopped; continue it with: ..." reads "Sweep 'NAME' stopped; ..."
            said = line.removeprefix("Sweep") if line.startswith("Sweep ") else f" {ended}: {line}"
            text = f"Sweep {self.name!r}{said}"
            self._post(ended, text, line=line, resume=resume)
            run.notes.extend(filter(None, [self.close()]))
            return
        book, best = run.book, run.book.best()
        value = best.last(book.metric) if best is not None else None
        text = f"Sweep {self.name!r} finished in {run.wall_seconds:.0f} s: " + (
            f"best trial {best.number}, {book.metric}={value:.4g}; " if value is not None else "")
        counts = {state: book.count(state) for state in (TrialState.COMPLETED, TrialState.PRUNED, TrialState.FAILED)}
        text += (f"{len(book.trials)} trials ({counts[TrialState.COMPLETED]} completed, {counts[TrialState.PRUNED]} "
                 f"pruned, {counts[TrialState.FAILED]} failed); cost {usd(run.cost.usd)}")
        self._post(
            "finished", text, best_trial=best.number if best else None, metric=book.metric, value=value,
            params=best.params if best else None, usd=run.cost.usd, accelerator_hours=run.cost.accelerator_hours,
            wall_seconds=round(run.wall_seconds, 1), trials=len(book.trials),
            **{str(state): count for state, count in counts.items()},
        )
        run.notes.extend(filter(None, [self.close()]))

    def sweep_broke(self, error: BaseException, console) -> None:
        """The launch raised `error` while the sweep ran: failed (or stopped, for a second
        Ctrl-C or an exit), with the line the terminal shows; then the wait, as `sweep_ended`,
        and the line naming what was not delivered printed on `console` (no summary follows)."""
        stopped = isinstance(error, (KeyboardInterrupt, SystemExit))
        line = "; ".join(getattr(error, "lines", None) or [f"{type(error).__name__}: {error}".rstrip(": ")])
        ended = "stopped" if stopped else "failed"
        resume = f"sweep resume {self.name}"
        how = "" if resume in line else f"; continue it with: {resume}"
        self._post(ended, f"Sweep {self.name!r} {ended}: {line}{how}", line=line, resume=resume)
        undelivered = self.close()
        if undelivered:
            console.print(undelivered, highlight=False, soft_wrap=True)

    def close(self) -> str | None:
        """Wait at most notify.timeout_seconds for the posts still under way; one line naming
        each message not delivered (by webhook key, never URL), or None."""
        deadline = time.monotonic() + self.wait_s
        lost = [(sender.webhook.key, sender.close(deadline)) for sender in self.senders]
        lost = [(key, failures) for key, failures in lost if failures]
        if not lost:
            return None
        count = sum(len(failures) for _, failures in lost)
        return f"Notifications: {count} not delivered: " + "; ".join(
            f"{key}: {_grouped(failures)}" for key, failures in lost)

    # ------------------------------------------------------------ the driver's events

    def trial_result(self, record) -> None:
        self._tell_cap(ended=False)

    def trial_finished(self, record) -> None:
        if record.state == TrialState.FAILED:
            self._post("trial_failed", f"Sweep {self.name!r}: trial {record.number} failed: {record.error}",
                       trial=record.number, error=record.error)
        best = self._best_now()
        if best is not None and best != self.best:
            self.best = best
            trial = self.book.trials[best[0]]
            params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.params.items())
            self._post("new_best", f"Sweep {self.name!r}: new best trial {trial.number}, {self.book.metric}="
                       f"{best[1]:.4g}" + (f" ({params})" if params else ""),
                       trial=trial.number, metric=self.book.metric, value=best[1], params=trial.params)
        self._tell_cap(ended=False)

    # ------------------------------------------------------------ helpers

    def _best_now(self) -> tuple[str, float] | None:
        best = self.book.best()
        return (best.trial_id, best.last(self.book.metric)) if best is not None else None

    def _tell_cap(self, ended: bool) -> None:
        line = None if self.cap_told or self.cap_line is None else self.cap_line(ended)
        if line:
            self.cap_told = True
            self._post("budget_cap", f"Sweep {self.name!r}: budget cap reached: {line}", line=line)

    def _post(self, event: str, text: str, **fields) -> None:
        payload = {"text": text, "event": event, "sweep": self.name,
                   "time": datetime.now(timezone.utc).isoformat(timespec="seconds"), **fields}
        for sender in self.senders:
            if event in sender.webhook.events:
                sender.send(event, payload)


def _grouped(failures: list[tuple[str, str]]) -> str:
    """`started (no answer within 5 s; 3 tries); new_best, finished (not sent before the
    sweep ended)`: the events of each reason together, in order."""
    reasons: dict[str, list[str]] = {}
    for event, why in failures:
        reasons.setdefault(why, []).append(event)
    return "; ".join(f"{', '.join(events)} ({why})" for why, events in reasons.items())
