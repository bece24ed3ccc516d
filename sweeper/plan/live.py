"""The live forecast: while a sweep runs, what is left of it in wall time and dollars,
re-estimated at every evaluation from the step times the trials have measured. Pure: the
measurements and where each trial stands come in as numbers.

The estimator, in one rule per figure (seconds per step, per evaluation, per Train run's
start, per run's stop, per slot's turnaround): the forecast's figure is the prior and
counts as the observations that measured it (`PriorWeight`: a calibration copy times 5
steps, one evaluation and one start; the throughput model, which measures nothing, and
the stop and turnaround constants as one each); every step, evaluation, start, stop and
turnaround the sweep measures is one more observation. The estimate is their mean,

    (weight x calibrated + sum of measured) / (weight + count measured),

the precision-weighted blend of two estimates of one mean when each observation is equally
noisy: with nothing measured it is the calibration, and it tends to the measured mean as
measurements accumulate (after 100 measured steps a 2-copy calibration weighs 10 / 110).

What is left is the forecast's own segment arithmetic (`sweeper.plan.forecast.remaining`)
at these figures, from where the trials stand: the ladder's expected trials per rung,
less those that reached it, the running trials to their next milestone, the rest of the
ladder for the others.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sweeper.cost.throughput import TrialTiming
from sweeper.plan.forecast import Forecast, Scenario, TrialAt, expected_ladder, remaining, within_caps
from sweeper.plan.sweep_plan import SweepPlan
from sweeper.views import usd

__all__ = [
    "Measured", "PriorWeight", "LiveEstimate", "blend", "live_timing", "rescaled", "estimate", "duration",
]

# What one calibration copy times: its measured interval (sweeper/plan/calibrate.py).
CALIBRATED_STEPS = 5


@dataclass
class Measured:
    """Sums of what the sweep's trials measured, from their reports."""

    steps: int = 0
    train_seconds: float = 0.0  # the loops' own training time of those steps
    evaluations: int = 0
    eval_seconds: float = 0.0  # each report's interval less its training: evaluation, checkpoint, report, driver
    starts: int = 0
    start_seconds: float = 0.0  # a Train run's start to its first report, less its steps and evaluation
    cold_starts: int = 0  # the same for the first wave's runs (their workers' processes start cold)
    cold_start_seconds: float = 0.0
    stops: int = 0
    stop_seconds: float = 0.0  # a run's last report to its end (or pause), as the driver sees it
    turnarounds: int = 0
    turnaround_seconds: float = 0.0  # a run's end to the next run's start on the freed slot
    # Intervals trained with no other trial running (the sums above leave them out: they
    # are the figures beside the other slots' runs, as the calibration measures them).
    alone_steps: int = 0
    alone_evaluations: int = 0
    alone_seconds: float = 0.0  # their whole intervals: steps, evaluation, report

    def add_interval(self, steps: int, train_seconds: float, rest_seconds: float, alone: bool = False) -> None:
        """A report `steps` after the last one of the same Train run (`alone`: no other
        trial ran from the one to the other)."""
        if alone:
            self.alone_steps += steps
            self.alone_evaluations += 1
            self.alone_seconds += train_seconds + max(0.0, rest_seconds)
            return
        self.steps += steps
        self.train_seconds += train_seconds
        self.evaluations += 1
        self.eval_seconds += max(0.0, rest_seconds)

    def alone_beside_others(self, step_seconds: float, eval_seconds: float) -> float:
        """What the intervals trained alone would have taken beside others, at these figures."""
        return self.alone_steps * step_seconds + self.alone_evaluations * eval_seconds

    def add_start(self, steps: int, train_seconds: float, start_seconds: float, cold: bool = False) -> None:
        """A Train run's first report: its steps count; the rest of its time, less one
        evaluation, is the run's start (`cold`: a run of the first wave)."""
        self.steps += steps
        self.train_seconds += train_seconds
        if cold:
            self.cold_starts += 1
            self.cold_start_seconds += max(0.0, start_seconds)
        else:
            self.starts += 1
            self.start_seconds += max(0.0, start_seconds)

    def add_stop(self, seconds: float) -> None:
        self.stops += 1
        self.stop_seconds += max(0.0, seconds)

    def add_turnaround(self, seconds: float) -> None:
        self.turnarounds += 1
        self.turnaround_seconds += max(0.0, seconds)


@dataclass(frozen=True)
class PriorWeight:
    """How many observations the calibrated figures count as (a trial's stop and a slot's
    turnaround are constants, never calibrated: one observation each)."""

    steps: float
    evaluations: float
    starts: float
    modelled: float = 1.0

    @classmethod
    def of(cls, forecast: Forecast) -> "PriorWeight":
        copies = forecast.measured_copies
        if copies == 0:  # the throughput model
            return cls(1.0, 1.0, 1.0)
        return cls(float(CALIBRATED_STEPS * copies), float(copies), float(copies))


def blend(prior: float, weight: float, total: float, count: float) -> float:
    """The mean of `weight` observations at `prior` and `count` measured ones summing to `total`."""
    return (weight * prior + total) / (weight + count)


def live_timing(prior: TrialTiming, measured: Measured, weight: PriorWeight) -> TrialTiming:
    """`prior` (the forecast's timing) updated by what the sweep measured."""
    # A first-wave start counts as a start less the cold start the forecast adds apart.
    start_seconds = measured.start_seconds + max(
        0.0, measured.cold_start_seconds - measured.cold_starts * prior.cold_start_seconds
    )
    step_seconds = blend(prior.step_seconds, weight.steps, measured.train_seconds, measured.steps)
    eval_seconds = blend(prior.eval_seconds, weight.evaluations, measured.eval_seconds, measured.evaluations)
    # Alone against beside others: the intervals measured alone over what they would have
    # taken at the figures above; the prior weighs what the calibration timed.
    beside_others = measured.alone_beside_others(step_seconds, eval_seconds)
    prior_seconds = weight.steps * step_seconds + weight.evaluations * eval_seconds
    return replace(
        prior,
        step_seconds=step_seconds,
        eval_seconds=eval_seconds,
        setup_seconds=blend(prior.setup_seconds, weight.starts, start_seconds, measured.starts + measured.cold_starts),
        stop_seconds=blend(prior.stop_seconds, weight.modelled, measured.stop_seconds, measured.stops),
        turnaround_seconds=blend(prior.turnaround_seconds, weight.modelled, measured.turnaround_seconds, measured.turnarounds),
        # What the slot arithmetic misses corrects the forecast before launch; the live
        # estimate's figures are this sweep's own (its ETA target was met without it).
        wall_ratio=1.0,
        alone_ratio=blend(prior.alone_ratio, prior_seconds, measured.alone_seconds, beside_others),
        source=(
            f"live: {measured.steps} steps, {measured.evaluations} evaluations, "
            f"{measured.starts + measured.cold_starts} starts measured"
        ),
    )


def rescaled(timing: TrialTiming, prior: TrialTiming, live: TrialTiming) -> TrialTiming:
    """`timing` (another config's calibrated figures, such as the costliest's) times what
    the live estimate makes of the prior's: each figure by live / prior."""

    def ratio(field: str) -> float:
        before = getattr(prior, field)
        return getattr(live, field) / before if before > 0 else 1.0

    return replace(
        timing,
        step_seconds=timing.step_seconds * ratio("step_seconds"),
        eval_seconds=timing.eval_seconds * ratio("eval_seconds"),
        setup_seconds=timing.setup_seconds * ratio("setup_seconds"),
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
        """For the live table: `ETA 3 min 10 s, $0.410000 to go of $1.20 expected (...)`."""
        t, m = self.timing, self.measured
        basis = (
            f"{m.steps} steps measured: {t.step_seconds * 1000:.1f} ms per step, "
            f"{t.eval_seconds * 1000:.0f} ms per evaluation, {t.setup_seconds:.1f} s per start"
            if m.steps
            else "calibrated; nothing measured yet"
        )
        return f"ETA {duration(self.left.wall_seconds)}, {usd(self.left.usd)} to go of {usd(self.total_usd)} expected ({basis})"


def estimate(
    plan: SweepPlan,
    forecast: Forecast,
    measured: Measured,
    trials: list[TrialAt],
    *,
    failed: int = 0,
    elapsed_seconds: float = 0.0,
    spent_usd: float = 0.0,
    spent_accelerator_hours: float = 0.0,
    spent_steps: int | None = None,
) -> LiveEstimate:
    """What is left of the sweep `plan` whose trials stand at `trials` (`failed` of them
    failed: the ladder counts the others), at the forecast's figures updated by `measured`,
    and no more than its budget caps leave (`spent_*`: what the sweep has used of them;
    its steps, by default those of `trials`)."""
    timing = live_timing(forecast.timing, measured, PriorWeight.of(forecast))
    # A sweep until a budget cap counts the trials its forecast said the cap buys (or the
    # trials it has started, once more).
    counted = plan.trials if plan.trials is not None else max(forecast.bought_trials or 1, len(trials))
    ladder, _, restarts = expected_ladder(plan, counted - failed)
    spent = Scenario(
        steps=sum(t.step for t in trials) if spent_steps is None else spent_steps,
        trial_seconds=0.0,  # no cap counts it
        wall_seconds=elapsed_seconds,
        accelerator_hours=spent_accelerator_hours,
        usd=spent_usd,
    )
    caps = plan.spec.budget.caps() if plan.spec.budget else {}
    left = within_caps(remaining(plan, timing, ladder, restarts, trials), caps, plan.concurrent_trials, spent)
    return LiveEstimate(elapsed_seconds, spent_usd, left, timing, measured)


def duration(seconds: float) -> str:
    """`45 s`, `3 min 10 s`, `2 h 05 min`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
