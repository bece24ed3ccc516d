"""The live forecast while `sweep start` runs: a listener of the driver callback
(sweeper/run/_driver.py) that measures the trials' steps, evaluations and Train-run starts
from the driver's events, shows what is left of the sweep under the live table, logs it on
the parent run (`forecast_remaining_s`, ... at step = evaluations seen) and gives the
budget guard its figures.

Each figure of the forecast (seconds per step, per evaluation, per start) is replaced by
the sweep's own mean once the sweep has measured one; what is left is the forecast's
arithmetic (`sweeper.plan.remaining`) at those figures, from where the trials stand. A
report's interval runs from the trial's previous report (or its run's start) to this
one's arrival at the driver, so everything the sweep pays for is in it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from sweeper.cost import Rate, TrialTiming
from sweeper.names import LiveForecastKey, TrialState
from sweeper.plan import Forecast, Scenario, TrialAt, after, remaining, within_caps, SweepPlan
from sweeper.views import duration, usd
from trainables.metrics import GENERATION_SECONDS, STEP, TOKENS_PER_SECOND, TRAIN_SECONDS, TRAIN_TOKENS

__all__ = ["Measured", "LiveEstimate", "LiveForecast", "live_timing", "estimate"]


@dataclass
class Measured:
    """Sums of what the sweep's trials measured, from their reports."""

    steps: int = 0
    train_seconds: float = 0.0  # the loops' own training time of those steps
    evaluations: int = 0
    eval_seconds: float = 0.0  # each interval less its training: evaluation, checkpoint, report
    starts: int = 0
    start_seconds: float = 0.0  # a Train run's start to its first report, less its steps and evaluation
    generations: int = 0
    generation_seconds: float = 0.0  # the generation passes the reports timed (a generation section)


def live_timing(prior: TrialTiming, measured: Measured) -> TrialTiming:
    """`prior` (the forecast's timing) with each figure the sweep has measured replaced by its mean."""

    def mean(total: float, count: int, before: float) -> float:
        return total / count if count else before

    return replace(
        prior,
        step_seconds=mean(measured.train_seconds, measured.steps, prior.step_seconds),
        eval_seconds=mean(measured.eval_seconds, measured.evaluations, prior.eval_seconds),
        setup_seconds=mean(measured.start_seconds, measured.starts, prior.setup_seconds),
        generation_seconds=mean(measured.generation_seconds, measured.generations, prior.generation_seconds),
        source=f"live: {measured.steps} steps, {measured.evaluations} evaluations, {measured.starts} starts measured",
    )


@dataclass(frozen=True)
class LiveEstimate:
    elapsed_seconds: float  # since the sweep's trials began
    spent_usd: float
    left: Scenario  # what is left
    timing: TrialTiming  # the live figures it was computed at
    measured: Measured

    @property
    def total_usd(self) -> float:
        return self.spent_usd + self.left.usd

    @property
    def total_seconds(self) -> float:
        return self.elapsed_seconds + self.left.wall_seconds

    def line(self) -> str:
        """For the live table: `ETA 3 min 10 s, $0.41 to go of $1.20 expected (...)`."""
        t, m = self.timing, self.measured
        basis = (
            f"{m.steps} steps measured: {t.step_seconds * 1000:.1f} ms per step, "
            f"{t.eval_seconds * 1000:.0f} ms per evaluation, {t.setup_seconds:.1f} s per start"
            + (f", {t.generation_seconds:.2f} s per generation pass" if t.generation_seconds else "")
            if m.steps else "forecast; nothing measured yet"
        )
        return f"ETA {duration(self.left.wall_seconds)}, {usd(self.left.usd)} to go of {usd(self.total_usd)} expected ({basis})"


def estimate(
    plan: SweepPlan, forecast: Forecast, measured: Measured, trials: list[TrialAt], failed: int = 0,
    spent: Scenario = Scenario(0, 0.0, 0.0, 0.0, 0.0), reruns: list[TrialAt] = (),
) -> LiveEstimate:
    """What is left of the sweep `plan` whose trials stand at `trials` (`failed` more
    failed: the ladder counts the others) and its search.confirm reruns at `reruns`, at
    the live figures, and no more than its budget caps leave after `spent` (its wall
    seconds: the time elapsed)."""
    timing = live_timing(forecast.timing, measured)
    # A sweep until a budget cap counts the trials its forecast said the caps buy (or those started, once more).
    counted = plan.trials if plan.trials is not None else max(forecast.bought_trials or 1, len(trials) + failed)
    caps = plan.spec.budget.caps() if plan.spec.budget else {}
    ahead = remaining(plan, timing, *plan.ladder(counted - failed), trials)
    confirm = plan.spec.search.confirm
    if confirm is not None:  # top x seeds to max_steps, after the search
        n = confirm.top * confirm.seeds
        ahead = after(ahead, remaining(plan.with_trials(n), timing, [(plan.spec.training.max_steps, n)], False, reruns))
    left, _ = within_caps(ahead, caps, plan.concurrent_trials, spent)
    return LiveEstimate(spent.wall_seconds, spent.usd, left, timing, measured)


class LiveForecast:
    """Measures as trials report and keeps `latest`, the sweep's live estimate."""

    # An estimate walks every trial's position: at most one per this many seconds (the
    # figures the budget guard commits trials at are current at every report).
    ESTIMATE_EVERY_S = 1.0

    def __init__(self, plan: SweepPlan, forecast: Forecast, book, rate: Rate, tracker=None, table=None, clock=time.time):
        self.plan, self.forecast, self.book, self.rate = plan, forecast, book, rate
        self.tracker, self.table, self.clock = tracker, table, clock
        self.measured = Measured()
        self.evaluations = 0  # reports seen: the step of the parent run's forecast metrics
        self.logged = False
        self.latest: LiveEstimate | None = None
        # trial id -> (when its Train run started or it last reported, the step then, no report yet in this run)
        self._since: dict[str, tuple[float, int, bool]] = {}
        self._estimated_at = float("-inf")

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks (the driver and its listeners) with the experiment.
        return {**self.__dict__, "tracker": None, "table": None, "book": None, "clock": None}

    def trial_started(self, record) -> None:
        self._since[record.trial_id] = (self.clock(), record.step, True)
        self.update(log=not self.logged)  # the forecast, logged once at step 0 before anything is measured

    def trial_result(self, record) -> None:
        now, m = self.clock(), self.measured
        report = record.history[-1]
        at, step, first = self._since.get(record.trial_id, (now, record.step, False))
        reported = int(report.get(STEP, step))
        # The loop's own training time (per worker): as it reports it, or from its tokens and their rate.
        tokens, per_second = report.get(TRAIN_TOKENS), report.get(TOKENS_PER_SECOND)
        training = report.get(TRAIN_SECONDS) or (tokens / per_second if tokens and per_second else None)
        if reported > step and training:
            generating = report.get(GENERATION_SECONDS) or 0.0
            rest = now - at - training - generating
            if generating:
                m.generations += 1
                m.generation_seconds += generating
            m.steps += reported - step
            m.train_seconds += training
            if first:  # a run's first report: the rest, less one evaluation, is its start
                m.starts += 1
                m.start_seconds += max(0.0, rest - self.timing().eval_seconds)
            else:
                m.evaluations += 1
                m.eval_seconds += max(0.0, rest)
        elif first and reported == step:  # an evaluation before the first step: the run's start and it
            m.starts += 1
            m.start_seconds += max(0.0, now - at - self.timing().eval_seconds)
        self._since[record.trial_id] = (now, reported, False)
        self.evaluations += 1
        self.update()

    def trial_paused(self, record) -> None:
        self._since.pop(record.trial_id, None)
        self.update(log=False)

    trial_finished = trial_paused

    def timing(self) -> TrialTiming:
        """The forecast's figures, each replaced by the sweep's own once measured."""
        return live_timing(self.forecast.timing, self.measured)

    def current(self) -> LiveEstimate:
        trials = list(self.book.trials.values())
        positions = [
            TrialAt(t.step, t.state == TrialState.RUNNING and not self._waiting_at_rung(t), t.startup_trial)
            for t in trials if t.state != TrialState.FAILED and t.confirms is None
        ]
        reruns = [TrialAt(t.step, t.state == TrialState.RUNNING) for t in trials if t.confirms is not None]
        failed = sum(1 for t in trials if t.state == TrialState.FAILED and t.confirms is None)
        cost = self.rate.trial_cost(sum(t.wall_seconds for t in trials))
        spent = Scenario(
            sum(t.step for t in trials), 0.0, self.clock() - self.book.started_at, cost.accelerator_hours, cost.usd
        )
        return estimate(self.plan, self.forecast, self.measured, positions, failed, spent, reruns)

    def _waiting_at_rung(self, record) -> bool:
        """The trial has just reported at a rung and waits for the scheduler there (most are
        paused or stopped at a rung), so it is not counted as training on into the next
        segment. An unranked (startup) trial goes on from every rung."""
        since = self._since.get(record.trial_id)
        return since is not None and not since[2] and not record.startup_trial and record.step in self.plan.rungs

    def update(self, log: bool = True) -> LiveEstimate | None:
        """Re-estimate; show the estimate under the table; at an evaluation, log it on the parent run."""
        if self.book is None:
            return None
        if self.latest is None or self.clock() - self._estimated_at >= self.ESTIMATE_EVERY_S:
            self._estimated_at = self.clock()
            self.latest = self.current()
        if self.table is not None:
            self.table.forecast(self.latest.line())
        if log and self.tracker is not None:
            self.tracker.log_sweep_metrics(self.metrics(), step=self.evaluations)
            self.logged = True
        return self.latest

    def metrics(self) -> dict[str, float]:
        e = self.latest
        return {
            LiveForecastKey.REMAINING_SECONDS: e.left.wall_seconds,
            LiveForecastKey.REMAINING_USD: e.left.usd,
            LiveForecastKey.TOTAL_SECONDS: e.total_seconds,
            LiveForecastKey.TOTAL_USD: e.total_usd,
            LiveForecastKey.ELAPSED_SECONDS: e.elapsed_seconds,
            LiveForecastKey.SPENT_USD: e.spent_usd,
            LiveForecastKey.STEPS_DONE: float(sum(t.step for t in self.book.trials.values())),
            LiveForecastKey.STEP_SECONDS: e.timing.step_seconds,
            LiveForecastKey.EVAL_SECONDS: e.timing.eval_seconds,
            LiveForecastKey.SETUP_SECONDS: e.timing.setup_seconds,
        }
