"""The driver's one Tune callback, and the one place that rebuilds a sweep's state on
resume.

`SweepDriver` keeps the SweepBook (every trial's record) from Tune's events, then tells
the listeners (MLflow tracking, the adapter janitor, the live table) about the record it
just updated, in their order. A listener is any object with some of these methods, each
called with the trial's TrialRecord once the book holds the event:

- `trial_started(record)`: a trial starts, or continues (after a pause or a resume);
- `trial_result(record)`: it reported; its last history entry is the new report;
- `trial_paused(record)`: it was paused at a rung (ASHA by promotion);
- `trial_finished(record)`: it completed, was pruned or failed (record.state says which).

Listeners need no Ray: they see records, not Tune's trials.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
import traceback
from typing import Callable, Protocol

from ray.tune import Callback

from sweeper.track import SweepBook, TrialRecord
from sweeper.search import STARTUP_ATTR, WARM_START_ATTR
from sweeper.confirm import CONFIRMS_ATTR
from sweeper.names import TrialState
from sweeper.run._janitor import error_reason, trial_error
from sweeper.cluster.ray_adapter import forget_running_averages, tune_trial_number
from sweeper.cluster.storage import DISK_FULL_TEXTS, disk_full
from trainables.metrics import RESTARTS, STEP, is_reported

__all__ = ["DISK_FULL", "SweepDriver", "TrialListener", "rebuild_for_resume", "disk_full_said_once", "sigterm_stops_like_sigint"]

# Why a trial stopped when its checkpoint found the disk full (its run's `sweeper.status`
# reads "stopped: disk full").
DISK_FULL = "disk full"


class TrialListener(Protocol):
    """What a listener may implement (all optional; see the module docstring)."""

    def trial_started(self, record: TrialRecord) -> None: ...

    def trial_result(self, record: TrialRecord) -> None: ...

    def trial_paused(self, record: TrialRecord) -> None: ...

    def trial_finished(self, record: TrialRecord) -> None: ...


class SweepDriver(Callback):
    """Tune callback on the driver: updates the book first, then tells `listeners`."""

    def __init__(self, book: SweepBook, listeners: list, trial_marks: Callable[[str], dict] | None = None):
        self.book, self.listeners = book, listeners
        # Tune trial id -> what the searcher marked it with (startup trial, warm-start
        # source): `StepAwareOptunaSearch.marks`, from the searcher's memory; None where
        # nothing is searched. Set by the launch once the searcher exists (a resumed
        # sweep's searcher is restored with the tuner, which needs this callback first).
        self.trial_marks = trial_marks
        # Every trial this driver's Tune run knows of (restored ones included).
        self.known_to_tune: set[str] = set()
        # A trial's checkpoint found the sweep's disk full: the sweep is stopping.
        self.stopped_for_disk_full = False

    def use_marks_of(self, search_alg) -> None:
        """Read what the searcher marked each trial with (a startup trial, a warm start's
        source) from the sweep's searcher inside `search_alg`'s wrappers, in memory;
        nothing where nothing is searched."""
        from sweeper.search import optuna_searcher

        searcher = optuna_searcher(search_alg)
        if searcher is not None:
            self.trial_marks = searcher.marks

    def _tell(self, event: str, record: TrialRecord) -> None:
        for listener in self.listeners:
            handler = getattr(listener, event, None)
            if handler is not None:
                handler(record)

    def lost_trials(self) -> list[TrialRecord]:
        """Unfinished trials of an earlier driver that Tune's saved state does not hold: that
        driver died after starting them but before Tune saved its state, so `sweep resume`
        cannot continue them (the search asks for other trials in their place). Tune's
        state is saved before each new trial starts (sweeper/search/_tune_state.py); a sweep
        begun by an older sweeper, whose scheduler Tune restores as it was, does not."""
        if not self.known_to_tune:
            return []
        return [t for t in self.book.trials.values() if not t.finished and t.trial_id not in self.known_to_tune]

    # ------------------------------------------------------------ Tune's events

    def on_step_begin(self, iteration, trials, **info):
        self.known_to_tune.update(trial.trial_id for trial in trials)
        # Tune has no callback for a pause (ASHA by promotion): a paused trial is seen
        # here, at the start of the loop step after it, before it can be resumed.
        for trial in trials:
            if trial.status != "PAUSED":
                continue
            record = self.book.trials.get(trial.trial_id)
            if record is not None and record.state == TrialState.RUNNING:
                record.state, record.ended_at = TrialState.PAUSED, time.time()
                record.pauses += 1
                self._tell("trial_paused", record)

    def on_trial_start(self, iteration, trials, trial, **info):
        record = self.book.trials.get(trial.trial_id)
        if record is None:
            record = TrialRecord(trial_id=trial.trial_id, number=self._number_of(trial), params=dict(trial.config))
            if self.trial_marks is not None:
                marks = self.trial_marks(trial.trial_id)
                record.startup_trial = bool(marks.get(STARTUP_ATTR))
                record.warm_start = marks.get(WARM_START_ATTR)
                record.confirms = marks.get(CONFIRMS_ATTR)  # a confirmation rerun (sweeper/confirm)
            self.book.trials[trial.trial_id] = record
        elif record.finished:  # restored as finished: nothing starts
            return
        else:  # continued after a pause or `sweep resume`
            record.prior_wall_seconds = record.wall_seconds if record.ended_at else record.prior_wall_seconds
            record.state, record.started_at, record.ended_at = TrialState.RUNNING, time.time(), None
        self._tell("trial_started", record)

    def _number_of(self, trial) -> int:
        """Tune's number for the trial (its name says it too). A killed driver may have run
        trials after Tune last saved its state, and Tune's count restarts below them: an
        unfinished one is lost (discarded at the end) and its number goes to the trial
        that takes its place; a finished one stays in MLflow with its number, and the
        new trial gets the next free one."""
        number = tune_trial_number(trial)
        lost = {record.trial_id for record in self.lost_trials()}
        taken = {record.number for record in self.book.trials.values() if record.trial_id not in lost}
        return number if number not in taken else max(taken) + 1

    def on_trial_result(self, iteration, trials, trial, result, **info):
        record = self.book.trials[trial.trial_id]
        record.checkpoint_path = result.get("checkpoint_path", record.checkpoint_path)
        if record.history and result.get(STEP, 0) <= record.step:
            # Had already, from MLflow: a trial whose last report the killed driver recorded
            # after Tune last saved its state gives that report again on `sweep resume`.
            return
        if trial.num_failures:  # Tune retried the trial from its latest checkpoint (search.max_failures)
            result[RESTARTS] = trial.num_failures
        record.history.append({k: v for k, v in result.items() if is_reported(k)})
        self._tell("trial_result", record)

    def on_trial_complete(self, iteration, trials, trial, **info):
        record = self.book.trials[trial.trial_id]
        record.stop_clock()
        record.state = TrialState.COMPLETED if record.step >= self.book.max_steps else TrialState.PRUNED
        self._tell("trial_finished", record)
        forget_running_averages(trial)  # about 30 KB a trial, kept for the whole sweep

    def on_trial_error(self, iteration, trials, trial, **info):
        if trial.trial_id not in self.book.trials:
            # Failed before it started (its actor never ran): recorded, started and failed,
            # so its run in MLflow says why.
            self.on_trial_start(iteration, trials, trial)
        record = self.book.trials[trial.trial_id]
        error = trial_error(trial)
        if disk_full(error):
            # Not the trial's fault: it stays unfinished (its run tagged "stopped: disk full"
            # when the sweep ends), and the sweep stops as on Ctrl-C, through Tune's own
            # handler; `sweep resume` continues it from its last checkpoint once there is room.
            record.error = DISK_FULL
            if not self.stopped_for_disk_full:  # once: a second SIGINT would skip Tune's last save
                self.stopped_for_disk_full = True
                signal.raise_signal(signal.SIGINT)
            return
        record.state = TrialState.FAILED
        record.error = error_reason(error)
        if trial.num_failures > 1:  # Tune retried it from its latest checkpoint (search.max_failures)
            record.error += f" (also after {trial.num_failures - 1} retry(ies) from its latest checkpoint)"
        record.ended_at = time.time()
        self._tell("trial_finished", record)


def rebuild_for_resume(tracker, scheduler, searcher, study_url: str) -> None:
    """A resumed sweep's state, rebuilt in one order from the one record that outlives a
    killed driver, MLflow: the book from the sweep's MLflow runs (`tracker.reattach`),
    the Optuna study opened at `study_url` (in the sweep's folder, wherever the first
    driver kept it), then the rung ladder of ASHA by promotion from the book, with the
    trials the study marks unranked, then the study cross-checked against the book (a
    trial the last driver ended in MLflow but not in Optuna is told now). `scheduler`
    and `searcher` are the restored tuner's (None where the sweep has none)."""
    from sweeper.search import PromotionASHA, optuna_searcher

    tracker.reattach()
    searcher = optuna_searcher(searcher)
    if searcher is not None:
        searcher.use_study(study_url)  # the trials' marks too, from the study
    if isinstance(scheduler, PromotionASHA):
        scheduler.for_resume(tracker.book)
        # Repeats and startup trials, from the study (the sweep folder's, not the first driver's path).
        scheduler.mark_unranked(searcher.unranked if searcher is not None else ())
    if searcher is not None:
        searcher.reconcile(tracker.book)


# ------------------------------------------------------------ the driver's process while Tune runs


class _DiskFullTraceback(logging.Filter):
    """Drops Tune's and Ray's tracebacks of an error that is a full disk: the sweep says it
    in one line when it stops (sweeper/cluster/storage.py: disk_full_line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage() + ("".join(traceback.format_exception(*record.exc_info)) if record.exc_info else "")
        return not any(marker in text for marker in DISK_FULL_TEXTS)


@contextlib.contextmanager
def disk_full_said_once():
    """On the handlers Ray's loggers end at (the "ray" logger's and the root's): Tune logs a
    failed trial's traceback, and Ray's core an error no one fetched, from loggers of their
    own modules, whose records reach those handlers."""
    quiet = _DiskFullTraceback()
    handlers = {*logging.getLogger("ray").handlers, *logging.getLogger().handlers}
    for each in handlers:
        each.addFilter(quiet)
    try:
        yield
    finally:
        for each in handlers:
            each.removeFilter(quiet)


@contextlib.contextmanager
def sigterm_stops_like_sigint(received: list[int]):
    """While the tuner runs, SIGTERM (a job scheduler, `kill`, a container stop, a Ray Job
    stopped) does what SIGINT does: Tune's own SIGINT handler, which `fit()` installs, stops
    the trials, saves their checkpoints and Tune's state, and `fit()` returns; a second one
    skips that, as a second Ctrl-C does. `received` gets the signal's number, for the
    exit status (128 + 15). Ray's driver handler (`sys.exit` on SIGTERM, set by
    `ray.init`) is put back afterwards."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def on_sigterm(signum, frame):
        received.append(signum)
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIG_DFL or SIG_IGN: none of Python's; stop as Python stops on SIGINT
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
