"""Tune's state is saved before a new trial starts, so `sweep resume` finds the trial there.

Tune saves its experiment state (its trials, the searcher, the callbacks) at most every
10 s, more rarely as the state grows. A trial started in between has an MLflow run and an
Optuna trial, and reports, but would not be in the state `sweep resume` restores after the
driver was killed: resume would drop it, delete its run and give its number to the trial
in its place. Saved when it is added, it comes back under its own id, and its Train run
goes on from the checkpoint it kept.

`NewTrialsSavedFirst` goes first among a scheduler's bases. Tune adds the trials the
search suggested at the top of its loop step, then asks the scheduler which trial to run
before it starts any actor; the save is made then, once for all the trials just added.
Trials a resumed sweep restores are added before the first step: the save waits for that
step, so it never holds part of them.

A save writes every trial's state, so its cost grows with the sweep (benchmarks/load.py
measures it). These saves may take at most `SAVE_SHARE` of the driver's time, as Tune's
own period keeps its saves at 5%: a sweep of trials that
last minutes saves before each one; one of thousands of trials of a second or two saves
as often as that share allows, each save holding every trial added since the last.
"""

from __future__ import annotations

import time

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule, TrialScheduler

from sweeper.cluster.ray_adapter import save_tune_state
from sweeper.search._asha import PromotionASHA
from trainables.metrics import before_training

__all__ = ["NewTrialsSavedFirst", "SavedPromotionASHA", "SavedASHAScheduler", "SavedMedianStoppingRule", "SavedFIFOScheduler"]


class TimeShare:
    """The time some work has taken since it was first done: work whose cost grows with the
    sweep runs only while it has taken at most a share of the wall time since then."""

    def __init__(self) -> None:
        self.since: float | None = None  # when it was first done
        self.spent = 0.0

    def allows(self, share: float, now: float) -> bool:
        return self.since is None or self.spent <= share * (now - self.since)

    def add(self, started: float, ended: float) -> None:
        if self.since is None:
            self.since = started
        self.spent += ended - started


class NewTrialsSavedFirst:
    """Mixin for a Tune scheduler: Tune's state is saved before a trial that has never
    reported starts (a new trial, or a restored one that had not reported yet), while
    these saves have taken at most SAVE_SHARE of the time since this driver's first."""

    SAVE_SHARE = 0.05
    _trials_to_save = False
    # The saves' time (monotonic clock), made at the first save: Tune pickles a scheduler
    # only before its first step, and restores a sweep's as it was pickled.
    _saves: TimeShare | None = None

    def on_trial_add(self, tune_controller, trial) -> None:
        super().on_trial_add(tune_controller, trial)
        if not trial.has_reported_at_least_once:
            self._trials_to_save = True

    def choose_trial_to_run(self, tune_controller):
        self._saves = self._saves or TimeShare()
        if self._trials_to_save and self._saves.allows(self.SAVE_SHARE, time.monotonic()):
            started = time.monotonic()
            save_tune_state(tune_controller)
            self._saves.add(started, time.monotonic())
            self._trials_to_save = False
        return super().choose_trial_to_run(tune_controller)


class SavedPromotionASHA(NewTrialsSavedFirst, PromotionASHA):
    """ASHA by promotion (the default)."""


class SavedASHAScheduler(NewTrialsSavedFirst, ASHAScheduler):
    """ASHA by stopping."""


class SavedMedianStoppingRule(NewTrialsSavedFirst, MedianStoppingRule):
    """Median stopping. A report before the first step (`before_training`) is not one of
    the trial's results: Ray's rule would take the base model's value as the trial's best."""

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if before_training(result):
            return TrialScheduler.CONTINUE
        return super().on_trial_result(tune_controller, trial, result)


class SavedFIFOScheduler(NewTrialsSavedFirst, FIFOScheduler):
    """No early stopping."""
