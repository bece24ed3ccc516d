"""The driver's record of every trial (`SweepBook` of `TrialRecord`s) and the one rule for
"the best trial". The live table, the end-of-sweep summary, MLflow tracking and the
scheduler read this record; `sweeper.run._janitor` keeps it up to date from Tune's events.

Pure Python: no Ray, no MLflow.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from sweeper.names import TrialState
from trainables.metrics import (
    MICRO_BATCH, OUT_OF_MEMORY_AT_MICRO_BATCH, SETUP_PHASES, SETUP_SECONDS, STEP, TRAIN_TOKENS,
)

__all__ = ["TrialRecord", "SweepBook", "best_of", "better"]

T = TypeVar("T")


def better(a: float, b: float, goal: str) -> bool:
    """True if value `a` beats `b` under `goal` ("minimize" or "maximize")."""
    return a < b if goal == "minimize" else a > b


def best_of(candidates: Iterable[T], value: Callable[[T], float | None], goal: str) -> T | None:
    """The candidate whose value is best under `goal`; candidates without a finite value
    are skipped, ties go to the first. None if none has a value.

    The one definition of "best trial": the book, the store, `sweep list` and the reports
    all call it, each with the trials it considers (completed ones, as a rule).

    >>> best_of([("a", 3.0), ("b", None), ("c", 2.0)], lambda t: t[1], "minimize")
    ('c', 2.0)
    """
    best, best_value = None, None
    for candidate in candidates:
        score = value(candidate)
        if score is None or not math.isfinite(score):
            continue
        if best_value is None or better(score, best_value, goal):
            best, best_value = candidate, score
    return best


@dataclass
class TrialRecord:
    trial_id: str
    number: int
    params: dict
    state: TrialState = TrialState.RUNNING
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
    # What the searcher marked it with: one of the sweep's first
    # `early_stopping.startup_trials` (trains to max_steps unranked), and where a warm
    # start's config came from ("<earlier sweep>/<trial id>").
    startup_trial: bool = False
    warm_start: str | None = None
    # A confirmation rerun (search.confirm): the number of the search trial whose config it
    # trains again with a new seed; None for a trial of the search.
    confirms: int | None = None

    def __setattr__(self, name, value) -> None:
        # A state set from Tune's or MLflow's strings is the enum all the same.
        super().__setattr__(name, TrialState(value) if name == "state" else value)

    @property
    def step(self) -> int:
        return self.history[-1][STEP] if self.history else 0

    @property
    def setup_seconds(self) -> float | None:
        """From the first report that carries it: one at step 0 (an evaluation before the
        first step) does not."""
        return next((report[SETUP_SECONDS] for report in self.history if SETUP_SECONDS in report), None)

    @property
    def setup_phases(self) -> dict[str, float]:
        return self.history[0].get(SETUP_PHASES, {}) if self.history else {}

    @property
    def train_tokens(self) -> float:
        return sum(report.get(TRAIN_TOKENS, 0) for report in self.history)

    @property
    def out_of_memory(self) -> str | None:
        """`out of memory at micro-batch 8, went on at 4` once a step of the trial ran out of
        memory and it went on at half the micro-batch (trainables/out_of_memory.py); else None."""
        for report in self.history:
            if OUT_OF_MEMORY_AT_MICRO_BATCH in report:
                at, went_on_at = int(report[OUT_OF_MEMORY_AT_MICRO_BATCH]), int(report[MICRO_BATCH])
                return f"out of memory at micro-batch {at}, went on at {went_on_at}"
        return None

    @property
    def wall_seconds(self) -> float:
        return self.prior_wall_seconds + (self.ended_at or time.time()) - self.started_at

    def stop_clock(self) -> None:
        """The trial stops spending now, if it is running: a paused one stopped when it
        paused, and one restored by `sweep resume` that did not run again stopped with
        the last driver."""
        if self.state == TrialState.RUNNING:
            self.ended_at = time.time()

    @property
    def finished(self) -> bool:
        return self.state.finished

    def last(self, metric: str) -> float | None:
        """The trial's metric is its last reported value: the adapter checkpoint matches it."""
        for report in reversed(self.history):
            if metric in report:
                return report[metric]
        return None

    @property
    def status_text(self) -> str:
        """The state in words, as `sweep status` and the tag `sweeper.status` show it:
        `pruned at step 30`, `failed: RuntimeError: ...`, `completed`."""
        if self.state in (TrialState.PRUNED, TrialState.PAUSED):
            return f"{self.state} at step {self.step}"
        if self.state == TrialState.FAILED:
            return f"failed: {self.error}"
        if self.state == TrialState.STOPPED and self.error:  # stopped by a fault, not a user: which
            return f"stopped: {self.error}"
        return str(self.state)


@dataclass
class SweepBook:
    metric: str
    goal: str
    max_steps: int
    trials: dict[str, TrialRecord] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    # search.confirm: the trial its confirmation picked (the winning config's best rerun),
    # and the confirmation itself (a sweeper.confirm.Confirmation, for the summary).
    chosen: str | None = None
    confirmation: object = None

    def better(self, a: float, b: float) -> bool:
        return better(a, b, self.goal)

    def best(self, states: Iterable[TrialState] = (TrialState.COMPLETED,)) -> TrialRecord | None:
        """The trial confirmation picked, once it has; else the best trial of the search by
        its last metric among trials in one of `states` (confirmation reruns left out)."""
        if self.chosen in self.trials:
            return self.trials[self.chosen]
        states = set(states)
        candidates = (t for t in self.trials.values() if t.state in states and t.confirms is None)
        return best_of(candidates, lambda t: t.last(self.metric), self.goal)

    def count(self, state: TrialState) -> int:
        return sum(1 for t in self.trials.values() if t.state == state)

    def unfinished(self, num_trials: int | None) -> bool:
        """True if the sweep ended before all its trials ran (it was stopped). Without a
        trial count (trials until a budget cap) only the cap ends a sweep: True; the
        caller asks the budget whether it did."""
        if num_trials is None:
            return True
        return len(self.trials) < num_trials or any(not t.finished for t in self.trials.values())

    def median_setup_seconds(self) -> float | None:
        values = [t.setup_seconds for t in self.trials.values() if t.setup_seconds is not None]
        return statistics.median(values) if values else None
