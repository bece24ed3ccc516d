"""The driver's record of every trial, kept by a Tune callback. The live table, the
end-of-sweep summary and MLflow tracking all read this one record."""

from __future__ import annotations

import math
import re
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from ray.tune import Callback

# Keys a trial reports (trainables/<task>.py); everything else in a Tune result is Tune's.
REPORTED_KEYS = (
    "step",
    "eval_loss",
    "eval_perplexity",
    "eval_rewards_chosen",
    "eval_rewards_rejected",
    "eval_rewards_margin",
    "eval_rewards_accuracy",
    "train_loss",
    "learning_rate",
    "tokens_per_second",
    "train_tokens",
    "train_cpu_share",
    "setup_seconds",
    "setup_phases",  # first report only: where the setup time went (trainables/worker.py)
)


@dataclass
class TrialRecord:
    trial_id: str
    number: int
    params: dict
    status: str = "running"  # running | paused | completed | pruned | failed
    history: list[dict] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    error: str | None = None
    checkpoint_path: str | None = None
    # Wall time of earlier segments: before a pause (ASHA by promotion), or before the
    # sweep was stopped, for a trial continued by `sweep resume`.
    prior_wall_seconds: float = 0.0
    # Times the trial was paused at a rung (each continuation is a new Train run).
    pauses: int = 0

    @property
    def step(self) -> int:
        return self.history[-1]["step"] if self.history else 0

    @property
    def setup_seconds(self) -> float | None:
        return self.history[0].get("setup_seconds") if self.history else None

    @property
    def setup_phases(self) -> dict[str, float]:
        return self.history[0].get("setup_phases", {}) if self.history else {}

    @property
    def train_tokens(self) -> float:
        return sum(report.get("train_tokens", 0) for report in self.history)

    @property
    def wall_seconds(self) -> float:
        return self.prior_wall_seconds + (self.ended_at or time.time()) - self.started_at

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "pruned", "failed")

    def last(self, metric: str) -> float | None:
        """The trial's metric is its last reported value: the adapter checkpoint matches it."""
        for report in reversed(self.history):
            if metric in report:
                return report[metric]
        return None

    @property
    def status_text(self) -> str:
        if self.status in ("pruned", "paused"):
            return f"{self.status} at step {self.step}"
        if self.status == "failed":
            return f"failed: {self.error}"
        return self.status


@dataclass
class SweepBook:
    metric: str
    goal: str
    max_steps: int
    trials: dict[str, TrialRecord] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)

    def better(self, a: float, b: float) -> bool:
        return a < b if self.goal == "minimize" else a > b

    def best(self, statuses=("completed",)) -> TrialRecord | None:
        """Best trial by its last metric among trials with one of `statuses`."""
        best = None
        for trial in self.trials.values():
            value = trial.last(self.metric)
            if trial.status in statuses and value is not None and math.isfinite(value):
                if best is None or self.better(value, best.last(self.metric)):
                    best = trial
        return best

    def count(self, status: str) -> int:
        return sum(1 for t in self.trials.values() if t.status == status)

    def unfinished(self, num_trials: int) -> bool:
        """True if the sweep ended before all its trials ran (it was stopped)."""
        return len(self.trials) < num_trials or any(not t.finished for t in self.trials.values())

    def median_setup_seconds(self) -> float | None:
        values = [t.setup_seconds for t in self.trials.values() if t.setup_seconds is not None]
        return statistics.median(values) if values else None


class BookKeeper(Callback):
    """Tune callback that keeps the SweepBook up to date (runs on the driver)."""

    def __init__(self, book: SweepBook):
        self.book = book
        # Every trial this driver's Tune run knows of (restored ones included).
        self.known_to_tune: set[str] = set()

    def on_step_begin(self, iteration, trials, **info):
        self.known_to_tune.update(trial.trial_id for trial in trials)
        # Tune has no callback for a pause (ASHA by promotion): a paused trial is seen
        # here, at the start of the loop step after it, before it can be resumed.
        for trial in trials:
            record = self.book.trials.get(trial.trial_id)
            if trial.status == "PAUSED" and record is not None and record.status == "running":
                record.status, record.ended_at = "paused", time.time()
                record.pauses += 1

    def lost_trials(self) -> list[TrialRecord]:
        """Unfinished trials of an earlier driver that Tune's saved state does not hold: that
        driver died after starting them but before Tune saved its state, so `sweep resume`
        cannot continue them (the search asks for other trials in their place)."""
        if not self.known_to_tune:
            return []
        return [t for t in self.book.trials.values() if not t.finished and t.trial_id not in self.known_to_tune]

    def on_trial_start(self, iteration, trials, trial, **info):
        record = self.book.trials.get(trial.trial_id)
        if record is None:
            self.book.trials[trial.trial_id] = TrialRecord(
                trial_id=trial.trial_id, number=len(self.book.trials) + 1, params=dict(trial.config)
            )
        elif not record.finished:  # continued after a pause or `sweep resume`
            record.prior_wall_seconds = record.wall_seconds if record.ended_at else record.prior_wall_seconds
            record.status, record.started_at, record.ended_at = "running", time.time(), None

    def on_trial_result(self, iteration, trials, trial, result, **info):
        record = self.book.trials[trial.trial_id]
        record.history.append({k: result[k] for k in REPORTED_KEYS if k in result})
        record.checkpoint_path = result.get("checkpoint_path", record.checkpoint_path)

    def on_trial_complete(self, iteration, trials, trial, **info):
        record = self.book.trials[trial.trial_id]
        if record.status != "paused":  # else it ended when it was paused
            record.ended_at = time.time()
        record.status = "completed" if record.step >= self.book.max_steps else "pruned"

    def on_trial_error(self, iteration, trials, trial, **info):
        record = self.book.trials[trial.trial_id]
        record.status = "failed"
        # Tune writes the error file locally before calling back (get_error() reads the
        # synced copy, which may not exist yet).
        error_file = Path(trial.error_file) if trial.error_file else None
        record.error = error_reason(error_file.read_text() if error_file and error_file.is_file() else None)
        record.ended_at = time.time()


class AdapterJanitor(Callback):
    """Bounds disk use: once a trial finishes, only the adapters of the best
    `search.keep_best_adapters` finished trials are kept (completed ones first); running
    trials keep their latest checkpoint (Ray Train keeps one per trial)."""

    def __init__(self, book: SweepBook, keep_best: int):
        self.book, self.keep_best = book, keep_best

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._sweep()

    def on_trial_error(self, iteration, trials, trial, **info):
        self._sweep()

    def _sweep(self) -> None:
        sign = 1 if self.book.goal == "minimize" else -1
        finished = [t for t in self.book.trials.values() if t.finished and t.checkpoint_path]
        ranked = sorted(
            finished,
            key=lambda t: (
                t.status != "completed",
                t.last(self.book.metric) is None or not math.isfinite(t.last(self.book.metric)),
                sign * (t.last(self.book.metric) or 0.0),
            ),
        )
        for record in ranked[self.keep_best :]:
            shutil.rmtree(record.checkpoint_path, ignore_errors=True)


# Ray's wrappers around the error raised in the training loop.
_WRAPPER_ERRORS = ("WorkerGroupError", "TrainingFailedError", "RayTaskError", "TuneError", "ActorDiedError")


def error_reason(trace: str | None) -> str:
    """One line for why a trial failed, from the Tune error file: the training loop's own
    'SomeError: message' line, or a died worker process."""
    if not trace:
        return "unknown error (see the trial's error file)"
    lines = [line.strip() for line in str(trace).splitlines() if line.strip()]
    raised = [
        line
        for line in lines
        if re.match(r"^[\w.]+(Error|Exception): ", line) and not line.split(":")[0].endswith(_WRAPPER_ERRORS)
    ]
    if raised:
        return raised[-1][:200]
    if any("worker process has died" in line for line in lines):
        return "a worker process died (killed, out of memory, or crashed)"
    return lines[-1][:200]
