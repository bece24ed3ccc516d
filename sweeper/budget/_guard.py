"""Enforcing `budget.*` while a sweep runs, through Ray Tune's public interfaces.

`BudgetSearcher` wraps the sweep's searcher and holds new trials back while one more would
commit work past a cap: what is spent, each running trial's work to its next rung, and the
new trial's start and first rung, at the live forecast's figures (the forecast's until the
sweep measured its own). It waits while trials run (a pruned one frees its commitment) and
says `Searcher.FINISHED` once none runs or a cap is reached: for a sweep without
search.num_trials, that is what ends it. `BudgetStopper` is the run config's stopper: a
trial reporting at a rung stops there when going on would commit work past a cap, and
`stop_all()` ends the sweep once a cap is reached all the same (trials ran slower than
the estimate), each running trial within about one evaluation interval of it.

What is spent is measured on the book: each trial's wall time x its accelerators x the
price (`sweeper.cost.Rate`, as the tracker's trial costs), each trial's last reported
step, and the wall time since the book's start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ray.tune import Stopper
from ray.tune.search import Searcher

from sweeper.cost import Rate, sweep_rate, TrialTiming
from sweeper.names import BudgetKey, Tag, TrialState
from sweeper.plan import CAPS, generation_steps, Scenario, stretch_seconds
from sweeper.spec import BudgetSpec, evaluates_on_start, most_trials
from trainables.metrics import STEP

__all__ = ["BudgetGuard", "BudgetSearcher", "BudgetStopper"]


@dataclass
class BudgetGuard:
    """The caps, the book they are measured on, and what they cut."""

    budget: BudgetSpec
    book: object  # sweeper.track._book.SweepBook
    rate: Rate  # what a trial's second costs (the tracker's trial costs use the same)
    timing: TrialTiming  # the forecast's
    milestones: list[int]  # rungs, then max_steps
    eval_every: int
    num_trials: int | None  # None: trials keep coming until a cap
    slots: int = 1  # trials at once: as many trial processes, each started once by this driver
    generates: frozenset[int] | None = frozenset()  # where a trial generates (`generation_steps`)
    evaluates_on_start: bool = False  # a trial's first run evaluates before its first step (trl.eval_on_start)
    # What happened: the cap that stopped the sweep, and the trials it cut.
    reached_cap: str | None = None
    held_back_by: str | None = None
    ended_search: str | None = None  # the cap for which the searcher said FINISHED
    stopped_trials: list[int] = field(default_factory=list)
    spent_at_stop: Scenario | None = None
    suggested: set[str] = field(default_factory=set)  # trial ids let through, until they start
    # Trials stopped at a rung because going on would cross a cap, and the first such cap.
    held_at_rung: tuple[int, ...] = ()
    held_at_rung_by: str | None = None
    live: object = None  # the live forecast (sweeper/budget/_live_forecast.py)

    def __getstate__(self) -> dict:
        # Tune saves its searcher and stopper with the experiment; the book and the live
        # forecast are the driver's. A resumed sweep's guard judges at the figures saved
        # here and gets its own book (SweepBudget.guarded).
        return {**self.__dict__, "book": None, "live": None, "timing": self.commit_timing()}

    def commit_timing(self) -> TrialTiming:
        """What work still to come is judged at: the sweep's own figures once it measured some."""
        return self.live.timing() if self.live is not None and self.live.measured.steps else self.timing

    def spent(self) -> Scenario:
        trials = self.book.trials.values()
        seconds = sum(t.wall_seconds for t in trials)
        cost = self.rate.trial_cost(seconds)
        return Scenario(sum(t.step for t in trials), seconds, time.time() - self.book.started_at, cost.accelerator_hours, cost.usd)

    def caps(self) -> dict[str, float]:
        return self.budget.caps()

    def reached(self) -> str | None:
        """The first cap that what is spent has reached, or None."""
        if self.book is None:
            return None
        spent = self.spent()
        for cap, limit in self.caps().items():
            if spent.value(cap) >= limit:
                if self.reached_cap is None:
                    self.reached_cap, self.spent_at_stop = cap, spent
                    self.stopped_trials = [t.number for t in self.book.trials.values() if t.state == TrialState.RUNNING]
                return cap
        return None

    def work_to_next_rung(self, step: int, start: bool = False, new_process: bool = False) -> tuple[int, float]:
        """(steps, seconds) of a trial at `step` training on to its next milestone, and
        starting first when `start` (at step 0, with its evaluation before the first step
        where the sweep asks for one), in a new trial process when `new_process`."""
        end = next((m for m in self.milestones if m > step), self.milestones[-1])
        timing = self.commit_timing()
        seconds = stretch_seconds(timing, step, end, self.eval_every, self.milestones[-1], self.generates)
        if start:
            seconds += timing.setup_seconds + (timing.process_start_seconds if new_process else 0.0)
            seconds += timing.eval_seconds if self.evaluates_on_start and step == 0 else 0.0
        return max(0, end - step), seconds

    def starts_a_new_process(self) -> bool:
        """Whether the next trial to start pays a new trial process's start: Tune reuses a
        one-worker trial's process for the next trial, so this driver starts one per slot,
        for its first trials (a resumed sweep's driver too)."""
        started_here = sum(t.started_at >= self.book.started_at for t in self.book.trials.values())
        return started_here + len(self.starting()) < self.slots

    def running(self) -> list:
        """The trials running now (paused ones wait at a rung and spend nothing)."""
        if self.book is None:
            return []
        return [t for t in self.book.trials.values() if t.state == TrialState.RUNNING]

    def starting(self) -> list[str]:
        """Trials suggested but not in the book yet: Tune may ask for several in one loop
        step, before the first has started."""
        if self.book is None:
            return []
        self.suggested = {trial_id for trial_id in self.suggested if trial_id not in self.book.trials}
        return sorted(self.suggested)

    def new_trial_would_cross(self) -> str | None:
        """The cap that one more trial would cross, counting the running trials' work to
        their next rung and the first rung of those starting; None when it fits."""
        if self.book is None:
            return None
        new = self.work_to_next_rung(0, start=True, new_process=self.starts_a_new_process())
        cap = self._first_cap_crossed([new] * (len(self.starting()) + 1) + self._running_work(), wall_seconds=new[1])
        if cap:
            self.held_back_by = self.held_back_by or cap
        return cap

    def going_on_would_cross(self, trial_id: str, step: int) -> str | None:
        """The cap that trial `trial_id`, reporting at `step`, would cross by going on to
        its next rung, counting the other running trials' work to their next rungs; None
        when it fits, or when `step` is no rung (the work to a rung was judged when the
        trial started or went on from the rung before)."""
        if self.book is None or step not in self.milestones[:-1]:
            return None
        # The book has this trial's report before this one (Tune asks its stopper first).
        reported = self.book.trials[trial_id].step if trial_id in self.book.trials else 0
        steps, seconds = self.work_to_next_rung(step)
        work = [(max(0, step - reported) + steps, seconds), *self._running_work(but=trial_id)]
        cap = self._first_cap_crossed(work, wall_seconds=seconds)
        if cap:
            self.held_at_rung_by = self.held_at_rung_by or cap
            if trial_id in self.book.trials:
                self.held_at_rung = (*self.held_at_rung, self.book.trials[trial_id].number)
        return cap

    def _running_work(self, but: str | None = None) -> list[tuple[int, float]]:
        # A running trial that has not reported yet is still starting: its start is to come.
        return [self.work_to_next_rung(t.step, start=not t.history) for t in self.running() if t.trial_id != but]

    def _first_cap_crossed(self, work: list[tuple[int, float]], wall_seconds: float) -> str | None:
        """The first cap that what is spent plus `work` still to come (steps, trial seconds)
        would cross, the sweep's wall time running `wall_seconds` longer."""
        spent = self.spent()
        steps, seconds = sum(n for n, _ in work), sum(s for _, s in work)
        cost = self.rate.trial_cost(seconds)
        committed = Scenario(
            spent.steps + steps, spent.trial_seconds + seconds, spent.wall_seconds + wall_seconds,
            spent.accelerator_hours + cost.accelerator_hours, spent.usd + cost.usd,
        )
        return next((cap for cap, limit in self.caps().items() if committed.value(cap) > limit), None)

    def not_started(self) -> int:
        """Trials of search.num_trials never started (none for a sweep that runs until a cap)."""
        if self.book is None or self.num_trials is None:
            return 0
        return max(0, self.num_trials - len(self.book.trials))

    def cut(self) -> bool:
        """Whether a cap ended the sweep: reached, or trials held back for good; a sweep
        that runs until a cap ends by one when its searcher said no more trials."""
        if self.held_at_rung:
            return True
        if self.num_trials is None:
            return self.reached_cap is not None or self.ended_search is not None
        return self.reached_cap is not None or (self.held_back_by is not None and self.not_started() > 0)

    def ending_cap(self) -> str | None:
        """The cap that ended the sweep, or None."""
        if not self.cut():
            return None
        return self.reached_cap or self.ended_search or self.held_back_by or self.held_at_rung_by

    def summary(self) -> str | None:
        """One line on how the caps ended the sweep (which cap, the trials run, the steps
        trained), or None when they cut nothing."""
        if not self.cut():
            return None

        def named(cap: str) -> str:
            return f"budget.{cap} ({self.caps()[cap]:g} {CAPS[cap]})"

        parts = []
        if self.reached_cap:
            stopped = ", ".join(str(n) for n in self.stopped_trials) or "none"
            parts.append(f"{named(self.reached_cap)} reached at {self.spent_at_stop.value(self.reached_cap):.4g}: "
                         f"stopped the running trials ({stopped})")
        elif self.num_trials is None:
            parts.append(f"{named(self.ending_cap())}: no more trials started (one more trial's first rung would "
                         "have crossed the cap)")
        if self.held_back_by and self.not_started():
            parts.append(f"budget.{self.held_back_by}: {self.not_started()} of {self.num_trials} trials not started "
                         "(their first rung would have crossed the cap)")
        if self.held_at_rung:
            parts.append(f"budget.{self.held_at_rung_by}: trials {', '.join(str(n) for n in self.held_at_rung)} "
                         "stopped at a rung (going on to the next would have crossed the cap)")
        if self.book is not None:
            parts.append(f"the sweep ran {len(self.book.trials)} trials, {self.spent().steps} training steps")
        return "; ".join(parts)

    def as_tags_and_metrics(self) -> tuple[dict[str, str], dict[str, float]]:
        """For the parent run: `sweeper.budget_stop` (the cap that cut the sweep, or none) and
        what it cut."""
        cap = self.ending_cap()
        tags = {Tag.BUDGET_STOP: cap or "none"}
        if self.summary():
            tags[Tag.BUDGET_CUT] = self.summary()[:5000]
        metrics = {BudgetKey.cap(key): value for key, value in self.caps().items()}
        metrics[BudgetKey.TRIALS_STOPPED] = float(len(self.stopped_trials))
        metrics[BudgetKey.TRIALS_NOT_STARTED] = float(self.not_started() if self.cut() else 0)
        return tags, metrics


class BudgetSearcher(Searcher):
    """A searcher that stops suggesting (`Searcher.FINISHED`) once one more trial would
    commit work past a cap; otherwise its wrapped searcher answers. `searcher` is public,
    as on Ray's ConcurrencyLimiter, so that Tune finds a limiter wrapped inside."""

    def __init__(self, searcher: Searcher, guard: BudgetGuard):
        self.searcher, self.guard = searcher, guard
        super().__init__(metric=searcher.metric, mode=searcher.mode)

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return self.searcher.set_search_properties(metric, mode, config, **spec)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return self.searcher.set_max_concurrency(max_concurrent)

    def suggest(self, trial_id: str):
        if self.guard.reached():
            return Searcher.FINISHED
        crossing = self.guard.new_trial_would_cross()
        if crossing:
            # Tune never asks a searcher again once it said FINISHED, and saves that with
            # the experiment. While trials run, one may yet be pruned (its work to the next
            # rung no longer counts) and make room: wait (None). With none running, what
            # is committed can only grow: no more trials.
            if self.guard.running() or self.guard.starting():
                return None
            self.guard.ended_search = self.guard.ended_search or crossing
            return Searcher.FINISHED
        suggestion = self.searcher.suggest(trial_id)
        if suggestion not in (None, Searcher.FINISHED):
            self.guard.suggested.add(trial_id)
        return suggestion

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def on_pause(self, trial_id: str) -> None:
        self.searcher.on_pause(trial_id)

    def on_unpause(self, trial_id: str) -> None:
        self.searcher.on_unpause(trial_id)

    def add_evaluated_point(self, *args, **kwargs):
        return self.searcher.add_evaluated_point(*args, **kwargs)

    def get_state(self) -> dict:
        return self.searcher.get_state()

    def set_state(self, state: dict) -> None:
        self.searcher.set_state(state)

    def save(self, checkpoint_path: str) -> None:
        self.searcher.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.searcher.restore(checkpoint_path)


class BudgetStopper(Stopper):
    """Stops a trial at a rung when going on to its next rung would cross a cap (Tune asks
    it at each result, before the scheduler), and the whole sweep (`stop_all`) once a
    cap is reached."""

    def __init__(self, guard: BudgetGuard):
        self.guard = guard

    def __call__(self, trial_id: str, result: dict) -> bool:
        step = result.get(STEP)
        return step is not None and self.guard.going_on_would_cross(trial_id, int(step)) is not None

    def stop_all(self) -> bool:
        return self.guard.reached() is not None


def make_guard(spec, plan, book, forecast, live=None) -> BudgetGuard | None:
    """The sweep's guard, or None without a `budget` section; `live` the sweep's live forecast."""
    if spec.budget is None:
        return None
    return BudgetGuard(
        budget=spec.budget,
        book=book,
        rate=sweep_rate(spec),
        timing=forecast.timing,
        milestones=[*plan.rungs, spec.training.max_steps],
        eval_every=spec.training.eval_every,
        num_trials=most_trials(spec),
        slots=plan.concurrent_trials,
        generates=generation_steps(spec),
        evaluates_on_start=evaluates_on_start(spec),
        live=live,
    )
