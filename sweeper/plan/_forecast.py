"""Forecast: what a sweep will cost before it starts, by the cost model of the design. Pure:
a plan (its rung ladder, slots and per-trial resources) and a trial timing (seconds per
optimizer step, per evaluation, per Train run's start) become expected and worst-case
wall time, accelerator-hours and dollars.

- Expected: the steps the ASHA ladder trains (`SweepPlan.trials_per_milestone`), at the
  mean of the first and the costliest config's timing (sampled configs lie between).
  Under ASHA by promotion each segment between rungs is a Train run of its own (a
  promoted trial resumes from its checkpoint) and pays one start; the startup trials
  (`early_stopping.startup_trials`) train to max_steps in one run. Ray's ASHA (by
  stopping) is assumed to follow the same ladder, one start per trial; `median` and
  `none` are assumed to prune nothing.
- Worst case: every trial to `training.max_steps` at the costliest config's timing.
- Wall time: the trials' seconds shared among the slots (ASHA by promotion starts a
  promoted run as soon as its rung's quota allows, beside the rest), never less than one
  trial's own climb of the ladder.
- Price: accelerator-seconds x the price per accelerator-hour (`sweeper.cost._prices`).
- A sweep that runs until a budget cap (no search.num_trials): the most trials whose
  expected case fits every cap, and how many would fit without early stopping.
- While the sweep runs, `remaining` is the same arithmetic from where the trials stand, at
  the sweep's own figures (sweeper/budget/_live_forecast.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sweeper.cost import Rate, sweep_rate, TrialTiming
from sweeper.names import ForecastKey
from sweeper.plan._rungs import evaluations_between, milestone_counts
from sweeper.plan._sweep_plan import SweepPlan
from sweeper.spec import MOST_TRIALS
from sweeper.views import usd

__all__ = [
    "Scenario", "Forecast", "TrialAt", "forecast_sweep", "mean_of_configs", "expected_ladder", "remaining",
    "most_trials_within", "within_caps", "share_within_caps", "forecast_lines", "duration_text", "after",
]


@dataclass(frozen=True)
class Scenario:
    steps: int  # training steps over all trials
    trial_seconds: float  # sum of the trials' wall times (what the cost counts)
    wall_seconds: float  # the sweep's wall time on its slots
    accelerator_hours: float
    usd: float

    def value(self, cap: str) -> float:
        """The scenario in the unit of a budget cap (`budget.<cap>`)."""
        return {
            "max_usd": self.usd,
            "max_hours": self.wall_seconds / 3600,
            "max_accelerator_hours": self.accelerator_hours,
            "max_steps": self.steps,
        }[cap]


@dataclass(frozen=True)
class Forecast:
    timing: TrialTiming  # the expected case's: mean of the first and the costliest config
    costliest: TrialTiming  # the worst case's
    expected: Scenario
    worst: Scenario
    ladder: list[tuple[int, int]]  # (step, trials that train to it), expected case
    assumption: str  # what the expected case assumes about early stopping
    slots: int
    rate: Rate
    # A sweep until a budget cap: the trials the caps buy with and without early stopping,
    # and the cap one more trial would cross first.
    bought_trials: int | None = None
    bought_full_trials: int | None = None
    binding_cap: str | None = None
    # A sweep of search.num_trials that a cap stops first: the expected case of all its
    # trials (`expected` is cut at the cap), and that cap.
    uncapped: Scenario | None = None
    cut_by: str | None = None
    # search.confirm: the reruns (top x seeds, each to max_steps after the search), in
    # `expected` and `worst` above.
    confirm_trials: int = 0
    notes: list[str] = field(default_factory=list)

    def as_params(self) -> dict[str, str]:
        """The forecast as MLflow params of the parent run (`forecast_*`)."""
        t, e, w = self.timing, self.expected, self.worst
        return {
            ForecastKey.STEP_SECONDS: f"{t.step_seconds:.6g}",
            ForecastKey.EVAL_SECONDS: f"{t.eval_seconds:.6g}",
            ForecastKey.SETUP_SECONDS: f"{t.setup_seconds:.6g}",
            ForecastKey.COSTLIEST_STEP_SECONDS: f"{self.costliest.step_seconds:.6g}",
            ForecastKey.TIMING_SOURCE: t.source[:500],
            ForecastKey.EXPECTED_STEPS: str(e.steps),
            ForecastKey.EXPECTED_WALL_SECONDS: f"{e.wall_seconds:.6g}",
            ForecastKey.EXPECTED_ACCELERATOR_HOURS: f"{e.accelerator_hours:.6g}",
            ForecastKey.EXPECTED_USD: f"{e.usd:.6g}",
            ForecastKey.WORST_STEPS: str(w.steps),
            ForecastKey.WORST_WALL_SECONDS: f"{w.wall_seconds:.6g}",
            ForecastKey.WORST_ACCELERATOR_HOURS: f"{w.accelerator_hours:.6g}",
            ForecastKey.WORST_USD: f"{w.usd:.6g}",
            ForecastKey.ASSUMPTION: self.assumption[:500],
            **({ForecastKey.BUDGET_TRIALS: str(self.bought_trials)} if self.bought_trials is not None else {}),
        }

    def ending_metrics(self) -> dict[str, float]:
        """The totals logged again as metrics when the sweep ends, beside the actual cost (a
        sweep until a cap has no worst case above its caps: none logged)."""
        e, w = self.expected, self.worst
        metrics = {
            ForecastKey.EXPECTED_USD: e.usd,
            ForecastKey.EXPECTED_WALL_SECONDS: e.wall_seconds,
            ForecastKey.EXPECTED_ACCELERATOR_HOURS: e.accelerator_hours,
        }
        if self.bought_trials is None:
            metrics.update({ForecastKey.WORST_USD: w.usd, ForecastKey.WORST_WALL_SECONDS: w.wall_seconds})
        return metrics


def expected_ladder(plan: SweepPlan, num_trials: int | None = None) -> tuple[list[tuple[int, int]], str, bool]:
    """(ladder, assumption, each segment of a ranked trial is a new Train run) for the
    expected case; `num_trials` (the plan's when None) counts fewer trials (a live
    estimate leaves failed ones out)."""
    spec = plan.spec
    n = plan.trials if num_trials is None else num_trials
    max_steps, scheduler = spec.training.max_steps, spec.early_stopping.scheduler
    counts = plan.trials_per_milestone(n)
    if counts is not None:
        return counts, "ASHA by promotion: the ladder is known before launch (failed trials only lower it)", True
    if scheduler == "asha_stopping" and spec.search.parameters:
        counts = milestone_counts(n, plan.rungs, max_steps, spec.early_stopping.reduction_factor_for())
        return counts, "Ray's ASHA (by stopping): assumed to follow the same ladder as ASHA by promotion", False
    why = "median stopping decides as results arrive: assumed to prune nothing" if scheduler == "median" else "no early stopping"
    return [(max_steps, n)], why, False


@dataclass(frozen=True)
class TrialAt:
    """Where a trial of a running sweep stands, for what is left of it (`remaining`)."""

    step: int
    running: bool  # training now (not paused at a rung, not ended)
    unranked: bool = False  # a startup trial: climbs every rung in one Train run


def remaining(
    plan: SweepPlan, timing: TrialTiming, ladder: list[tuple[int, int]], restart_per_segment: bool,
    trials: list[TrialAt] = (),
) -> Scenario:
    """What is left of a sweep whose trials stand at `trials` (none: the whole sweep).
    Segment i of the ladder (from the milestone before to milestone i) is trained by
    ladder[i] trials: those that reached milestone i have trained it, a running trial
    inside it trains the rest of it, the trials still missing from the count train all of
    it, each paying a Train run's start where a new run begins (every trial's first
    segment; each later one of a ranked trial under ASHA by promotion). Wall time: those
    seconds over the slots, and at least one trial's climb still ahead."""
    training, stopping = plan.spec.training, plan.spec.early_stopping
    slots = max(1, plan.concurrent_trials)
    unranked_total = stopping.startup_trials_for() if restart_per_segment else 0

    def seconds(start: int, end: int) -> float:
        evaluations = evaluations_between(start, end, training.eval_every, training.max_steps)
        return (end - start) * timing.step_seconds + evaluations * timing.eval_seconds

    steps, trial_seconds, climb, previous = 0, 0.0, 0.0, 0
    longest_rest = 0.0
    for index, (milestone, expected) in enumerate(ladder):
        reached = [t for t in trials if t.step >= milestone]
        inside = [t for t in trials if t.running and previous <= t.step < milestone]
        missing = max(0, expected - len(reached) - len(inside))
        unranked_left = max(0, unranked_total - sum(1 for t in reached + inside if t.unranked))
        restarts = missing - min(missing, unranked_left) if (restart_per_segment and index) else 0
        starting = missing if index == 0 else restarts
        rests = [seconds(t.step, milestone) for t in inside]
        steps += missing * (milestone - previous) + sum(milestone - t.step for t in inside)
        trial_seconds += missing * seconds(previous, milestone) + starting * timing.setup_seconds + sum(rests)
        # A run still to start in this segment: before launch one trial climbs them all; once
        # trials stand on the ladder, the later runs may be theirs, and each run is the bound.
        run = seconds(previous, milestone) + (timing.setup_seconds if (index == 0 or restart_per_segment) else 0.0)
        if missing:
            climb = climb + run if not trials else max(climb, run)
        longest_rest = max([longest_rest, *rests])
        previous = milestone
    wall = max(trial_seconds / slots, climb, longest_rest)
    cost = sweep_rate(plan.spec).trial_cost(trial_seconds)
    return Scenario(steps, trial_seconds, wall, cost.accelerator_hours, cost.usd)


NOTHING_SPENT = Scenario(0, 0.0, 0.0, 0.0, 0.0)


def share_within_caps(left: Scenario, caps: dict[str, float], spent: Scenario = NOTHING_SPENT) -> tuple[float, str | None]:
    """(share, cap): how much of `left` fits under what the tightest cap has left after
    `spent` (1.0 and None when all of it fits)."""
    share, tightest = 1.0, None
    for cap, limit in caps.items():
        wanted = left.value(cap)
        if wanted > 0 and (limit - spent.value(cap)) / wanted < share:
            share, tightest = max(0.0, limit - spent.value(cap)) / wanted, cap
    return share, tightest


def within_caps(left: Scenario, caps: dict[str, float], slots: int, spent: Scenario = NOTHING_SPENT) -> Scenario:
    """`left`, cut where a budget cap ends the sweep first: the budget guard starts no trial
    and lets none go on whose work would cross a cap, so the sweep ends near the cap. The
    work is scaled by the share that fits under the tightest cap; it runs on full slots
    until then (a wall-hours cap leaves exactly its own share)."""
    share, cap = share_within_caps(left, caps, spent)
    if share >= 1.0:
        return left
    wall = left.wall_seconds * share if cap == "max_hours" else left.trial_seconds * share / max(1, slots)
    return Scenario(round(left.steps * share), left.trial_seconds * share, wall, left.accelerator_hours * share, left.usd * share)


def most_trials_within(caps: dict[str, float], scenario_for) -> tuple[int, str | None]:
    """(n, cap): the most trials whose scenario (`scenario_for(n)`) fits every cap, at least
    1, and the cap one more trial would cross first (None at MOST_TRIALS: no cap binds).
    A scenario grows with its trial count: doubling, then bisection.

    >>> most_trials_within({"max_steps": 100}, lambda n: Scenario(30 * n, 0, 0, 0, 0))
    (3, 'max_steps')
    """

    def crossed(n: int) -> str | None:
        scenario = scenario_for(n)
        return next((cap for cap, limit in caps.items() if scenario.value(cap) > limit), None)

    if crossed(1):
        return 1, crossed(1)
    low, high = 1, 2
    while not crossed(high):
        low = high
        if high >= MOST_TRIALS:
            return MOST_TRIALS, None
        high *= 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if crossed(middle) else (middle, high)
    return (MOST_TRIALS, None) if low >= MOST_TRIALS else (low, crossed(low + 1))


def mean_of_configs(first: TrialTiming, costliest: TrialTiming) -> TrialTiming:
    """The expected case's timing: sampled configs lie between the first and the costliest."""
    return replace(
        first,
        step_seconds=(first.step_seconds + costliest.step_seconds) / 2,
        eval_seconds=(first.eval_seconds + costliest.eval_seconds) / 2,
        setup_seconds=(first.setup_seconds + costliest.setup_seconds) / 2,
    )


def forecast_sweep(plan: SweepPlan, first: TrialTiming, costliest: TrialTiming | None = None) -> Forecast:
    """Expected and worst-case cost of the sweep `plan`, `first` the first config's timing,
    `costliest` the dearest config's in the space (the first's where its steps timed
    below it: noise)."""
    spec = plan.spec
    costliest = max(costliest or first, first, key=lambda t: t.step_seconds)
    mean = mean_of_configs(first, costliest)
    caps = spec.budget.caps() if spec.budget else {}
    bought = full = binding = None
    if plan.trials is None:  # until a budget cap: the most trials it buys
        def expected_case(n: int) -> Scenario:
            ladder, _, restarts = expected_ladder(plan.with_trials(n))
            return remaining(plan.with_trials(n), mean, ladder, restarts)

        bought, binding = most_trials_within(caps, expected_case)
        full, _ = most_trials_within(
            caps, lambda n: remaining(plan.with_trials(n), costliest, [(spec.training.max_steps, n)], False)
        )
        worst_plan, plan = plan.with_trials(full), plan.with_trials(bought)
    else:
        worst_plan = plan
    ladder, assumption, restarts = expected_ladder(plan)
    reruns = spec.search.confirm.top * spec.search.confirm.seeds if spec.search.confirm else 0
    uncapped = after(remaining(plan, mean, ladder, restarts), _to_the_end(plan, mean, reruns))
    _, cut_by = share_within_caps(uncapped, caps)
    return Forecast(
        timing=mean,
        costliest=costliest,
        expected=within_caps(uncapped, caps, plan.concurrent_trials) if cut_by else uncapped,
        worst=after(remaining(worst_plan, costliest, [(spec.training.max_steps, worst_plan.trials)], False),
                    _to_the_end(plan, costliest, reruns)),
        ladder=ladder,
        assumption=assumption,
        slots=plan.concurrent_trials,
        rate=sweep_rate(spec),
        bought_trials=bought,
        bought_full_trials=full,
        binding_cap=binding,
        uncapped=uncapped if cut_by else None,
        cut_by=cut_by,
        confirm_trials=reruns,
    )


def _to_the_end(plan: SweepPlan, timing: TrialTiming, trials: int) -> Scenario:
    """`trials` trials from step 0 to max_steps, on the plan's slots (none: nothing)."""
    if not trials:
        return NOTHING_SPENT
    return remaining(plan.with_trials(trials), timing, [(plan.spec.training.max_steps, trials)], False)


def after(first: Scenario, then: Scenario) -> Scenario:
    """`first`, then `then` once it has ended: the work and the wall time of both."""
    return Scenario(first.steps + then.steps, first.trial_seconds + then.trial_seconds,
                    first.wall_seconds + then.wall_seconds, first.accelerator_hours + then.accelerator_hours,
                    first.usd + then.usd)


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def forecast_summary(forecast: Forecast) -> str:
    """The forecast in one line (what `sweep start` shows; `forecast_lines` has the rest)."""
    t, expected, worst = forecast.timing, forecast.expected, forecast.worst
    return (
        f"Forecast: {duration_text(expected.wall_seconds)}, {usd(expected.usd)} expected "
        f"({duration_text(worst.wall_seconds)}, {usd(worst.usd)} without early stopping); "
        f"{t.step_seconds * 1000:.0f} ms a step, {t.eval_seconds * 1000:.0f} ms an evaluation, "
        f"{t.setup_seconds:.1f} s a trial start ({t.source})"
        + (f"; includes {forecast.confirm_trials} confirmation trial(s) to max_steps" if forecast.confirm_trials else "")
    )


def forecast_lines(forecast: Forecast, unit: str) -> list[str]:
    """The forecast as lines for the terminal; `unit` names the accelerator-hours (GPU-hours
    or CPU core-hours)."""
    t, rate = forecast.timing, forecast.rate
    ladder = ", ".join(f"{n} to step {step}" for step, n in forecast.ladder)
    lines = [
        f"Step budget by rung: {ladder} ({forecast.expected.steps} steps; {forecast.worst.steps} without early stopping)",
        f"Expected case: {forecast.assumption}",
        f"Step time: {t.step_seconds * 1000:.1f} ms per step (mean of the first and the costliest config; "
        f"costliest {forecast.costliest.step_seconds * 1000:.1f} ms), {t.eval_seconds * 1000:.0f} ms per "
        f"evaluation, {t.setup_seconds:.1f} s per trial start ({t.source})",
        f"Price: {usd(rate.usd_per_hour)} per {unit.removesuffix('s')} ({rate.accelerator}), "
        f"{rate.accelerators_per_trial:g} per trial, {forecast.slots} trial(s) at once",
    ]
    worst, expected = "Worst case (no pruning)", "Expected"
    if forecast.bought_trials is not None:
        worst = f"Without early stopping ({forecast.bought_full_trials} trial(s) to the end)"
        expected = f"Expected ({forecast.bought_trials} trials)"
    elif forecast.uncapped is not None:
        share = forecast.expected.value(forecast.cut_by) / max(forecast.uncapped.value(forecast.cut_by), 1e-12)
        expected = f"Expected (budget.{forecast.cut_by} stops it at about {share:.0%} of all its trials' expected work)"
    for label, scenario in ((expected, forecast.expected), (worst, forecast.worst)):
        lines.append(
            f"{label}: {duration_text(scenario.wall_seconds)} wall, {scenario.accelerator_hours:.4g} {unit}, {usd(scenario.usd)}"
        )
    if forecast.confirm_trials:
        lines.insert(1, f"Confirmation (search.confirm): {forecast.confirm_trials} trial(s) (top x seeds) to max_steps "
                        "after the search, counted in the steps above and the cases below")
    return lines + forecast.notes
