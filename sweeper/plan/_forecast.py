"""Forecast: what a sweep will cost before it starts, by the cost model of the design. Pure:
a plan (its rung ladder, slots, per-trial resources) and one trial timing (the costliest
config's seconds per step, per evaluation, per Train run's start) become the expected case
and the case without early stopping in wall time, accelerator-hours and dollars.

- Expected: the steps of the rung ladder (`SweepPlan.ladder`), a start for each Train run.
- Without early stopping ("worst" in the fields): every trial to `training.max_steps` in one
  run. Not always the larger: under ASHA by promotion each promoted trial starts a Train
  run again, so where starts cost more than the steps pruning saves, the expected case is.
- Wall time: the trials' seconds shared among the slots, never less than one trial's own
  climb of the ladder.
- Price: accelerator-seconds x the price per accelerator-hour (`sweeper.cost.Rate`).
- A sweep that runs until a budget cap: the most trials whose expected case fits every cap.

While the sweep runs, the live forecast (sweeper/budget/_live_forecast.py) runs `remaining`
from where the trials stand, at the sweep's own figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sweeper.cost import Rate, sweep_rate, TrialTiming
from sweeper.names import ForecastKey
from sweeper.plan._rungs import evaluations_between, generations_between
from sweeper.plan._sweep_plan import generation_steps, SweepPlan
from sweeper.spec import evaluates_on_start, MOST_TRIALS
from sweeper.views import duration, usd

__all__ = [
    "Scenario", "Forecast", "TrialAt", "forecast_sweep", "remaining", "stretch_seconds", "most_trials_within",
    "within_caps", "after", "forecast_lines", "forecast_summary",
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


NOTHING_SPENT = Scenario(0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Forecast:
    timing: TrialTiming
    ladder: list[tuple[int, int]]  # (step, trials that train to it)
    uncapped: Scenario  # the expected case of all the trials
    expected: Scenario  # the same, cut where a budget cap ends the sweep
    worst: Scenario  # every trial to max_steps in one run: without early stopping
    slots: int
    rate: Rate
    cut_by: str | None = None  # the cap that ends the sweep, if one does
    bought_trials: int | None = None  # a sweep until a cap: the trials its caps buy
    # search.confirm: the reruns (top x seeds, each to max_steps after the search), in
    # `expected` and `worst` above.
    confirm_trials: int = 0
    notes: list[str] = field(default_factory=list)

    def as_params(self) -> dict[str, str]:
        """The forecast as MLflow params of the parent run (`forecast_*`)."""
        t, e, w = self.timing, self.expected, self.worst
        params = {
            ForecastKey.STEP_SECONDS: f"{t.step_seconds:.6g}",
            ForecastKey.EVAL_SECONDS: f"{t.eval_seconds:.6g}",
            ForecastKey.SETUP_SECONDS: f"{t.setup_seconds:.6g}",
            ForecastKey.TIMING_SOURCE: t.source[:500],
            ForecastKey.EXPECTED_STEPS: str(e.steps),
            ForecastKey.EXPECTED_WALL_SECONDS: f"{e.wall_seconds:.6g}",
            ForecastKey.EXPECTED_ACCELERATOR_HOURS: f"{e.accelerator_hours:.6g}",
            ForecastKey.EXPECTED_USD: f"{e.usd:.6g}",
            ForecastKey.WORST_STEPS: str(w.steps),
            ForecastKey.WORST_WALL_SECONDS: f"{w.wall_seconds:.6g}",
            ForecastKey.WORST_ACCELERATOR_HOURS: f"{w.accelerator_hours:.6g}",
            ForecastKey.WORST_USD: f"{w.usd:.6g}",
        }
        if t.generation_seconds:
            params[ForecastKey.GENERATION_SECONDS] = f"{t.generation_seconds:.6g}"
        if self.bought_trials is not None:
            params[ForecastKey.BUDGET_TRIALS] = str(self.bought_trials)
        return params

    def ending_metrics(self) -> dict[str, float]:
        """The totals logged again as metrics when the sweep ends, beside the actual cost."""
        e, w = self.expected, self.worst
        return {
            ForecastKey.EXPECTED_USD: e.usd,
            ForecastKey.EXPECTED_WALL_SECONDS: e.wall_seconds,
            ForecastKey.EXPECTED_ACCELERATOR_HOURS: e.accelerator_hours,
            ForecastKey.WORST_USD: w.usd,
            ForecastKey.WORST_WALL_SECONDS: w.wall_seconds,
        }


@dataclass(frozen=True)
class TrialAt:
    """Where a trial of a running sweep stands, for what is left of it (`remaining`)."""

    step: int
    running: bool  # training now (not paused at a rung, not ended)
    unranked: bool = False  # a startup trial: climbs every rung in one Train run


def stretch_seconds(
    timing: TrialTiming, start: int, end: int, eval_every: int, max_steps: int,
    generates: frozenset[int] | None = frozenset(),
) -> float:
    """Seconds a trial trains from step `start` to `end`, its evaluations included and
    its generation passes (at every evaluation where `generates` is None, else at the
    evaluations on those steps and at max_steps: `generation_steps`)."""
    evaluations = evaluations_between(start, end, eval_every, max_steps)
    generations = generations_between(start, end, eval_every, max_steps, generates) if timing.generation_seconds else 0
    return ((end - start) * timing.step_seconds + evaluations * timing.eval_seconds
            + generations * timing.generation_seconds)


def remaining(
    plan: SweepPlan, timing: TrialTiming, ladder: list[tuple[int, int]], restart_per_segment: bool,
    trials: list[TrialAt] = (),
) -> Scenario:
    """What is left of a sweep whose trials stand at `trials` (none: the whole sweep).
    Segment i of the ladder (from the milestone before to milestone i) is trained by
    ladder[i] trials: those that reached milestone i have trained it, a running trial
    inside it trains the rest of it, the trials still missing from the count train all of
    it, each paying a start where a new Train run begins (every trial's first segment,
    with its evaluation before the first step where trl.eval_on_start asks for one; each
    later one of a ranked trial when `restart_per_segment`). Wall time: those
    seconds over the slots, and at least one trial's climb still ahead."""
    every = (plan.spec.training.eval_every, plan.spec.training.max_steps, generation_steps(plan.spec))
    # A trial's first run evaluates before its first step (trl.eval_on_start): part of its first start.
    first_evaluation = timing.eval_seconds if evaluates_on_start(plan.spec) else 0.0
    unranked_total = plan.spec.early_stopping.startup_trials_for() if restart_per_segment else 0
    steps, trial_seconds, climb, longest_rest, previous = 0, 0.0, 0.0, 0.0, 0
    for index, (milestone, expected) in enumerate(ladder):
        reached = [t for t in trials if t.step >= milestone]
        inside = [t for t in trials if t.running and previous <= t.step < milestone]
        missing = max(0, expected - len(reached) - len(inside))
        unranked_left = max(0, unranked_total - sum(1 for t in reached + inside if t.unranked))
        restarts = missing - min(missing, unranked_left) if (restart_per_segment and index) else 0
        starting = missing if index == 0 else restarts
        rests = [stretch_seconds(timing, t.step, milestone, *every) for t in inside]
        segment = stretch_seconds(timing, previous, milestone, *every)
        steps += missing * (milestone - previous) + sum(milestone - t.step for t in inside)
        start = timing.setup_seconds + (first_evaluation if index == 0 else 0.0)
        trial_seconds += missing * segment + starting * start + sum(rests)
        # A run still to start in this segment: before launch one trial climbs them all; once
        # trials stand on the ladder, the later runs may be theirs, and each run is the bound.
        run = segment + (start if (index == 0 or restart_per_segment) else 0.0)
        if missing:
            climb = climb + run if not trials else max(climb, run)
        longest_rest = max([longest_rest, *rests])
        previous = milestone
    if not trials and ladder:  # each slot's trial process starts once (reused by later trials)
        trial_seconds += min(plan.concurrent_trials, ladder[0][1]) * timing.process_start_seconds
        climb += timing.process_start_seconds
    wall = max(trial_seconds / max(1, plan.concurrent_trials), climb, longest_rest)
    cost = sweep_rate(plan.spec).trial_cost(trial_seconds)
    return Scenario(steps, trial_seconds, wall, cost.accelerator_hours, cost.usd)


def within_caps(
    left: Scenario, caps: dict[str, float], slots: int, spent: Scenario = NOTHING_SPENT
) -> tuple[Scenario, str | None]:
    """`left`, cut where the tightest budget cap ends the sweep after `spent`, and that cap
    (None when all of it fits). The budget guard starts no work that would cross a cap, so
    the work is scaled by the share that fits; it runs on full slots until then (a
    wall-hours cap leaves exactly its own share)."""
    share, tightest = 1.0, None
    for cap, limit in caps.items():
        wanted = left.value(cap)
        if wanted > 0 and (limit - spent.value(cap)) / wanted < share:
            share, tightest = max(0.0, limit - spent.value(cap)) / wanted, cap
    if tightest is None:
        return left, None
    wall = left.wall_seconds * share if tightest == "max_hours" else left.trial_seconds * share / max(1, slots)
    cut = Scenario(
        round(left.steps * share), left.trial_seconds * share, wall, left.accelerator_hours * share, left.usd * share
    )
    return cut, tightest


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


def forecast_sweep(plan: SweepPlan, timing: TrialTiming) -> Forecast:
    """The expected case and the case without early stopping of the sweep `plan` at
    `timing` (the costliest config's)."""
    spec = plan.spec
    caps = spec.budget.caps() if spec.budget else {}
    bought = binding = None
    if plan.trials is None:  # until a budget cap: the most trials it buys
        bought, binding = most_trials_within(caps, lambda n: remaining(plan.with_trials(n), timing, *plan.ladder(n)))
        plan = plan.with_trials(bought)
    reruns = spec.search.confirm.top * spec.search.confirm.seeds if spec.search.confirm else 0
    confirmation = _to_the_end(plan, timing, reruns)
    uncapped = after(remaining(plan, timing, *plan.ladder()), confirmation)
    expected, cut_by = within_caps(uncapped, caps, plan.concurrent_trials)
    return Forecast(
        timing=timing,
        ladder=plan.ladder()[0],
        uncapped=uncapped,
        expected=expected,
        worst=after(remaining(plan, timing, [(spec.training.max_steps, plan.trials)], False), confirmation),
        slots=plan.concurrent_trials,
        rate=sweep_rate(spec),
        cut_by=cut_by or binding,
        bought_trials=bought,
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


def forecast_summary(forecast: Forecast) -> str:
    """The forecast in one line (what `sweep start` shows; `forecast_lines` has the rest)."""
    t, expected, worst = forecast.timing, forecast.expected, forecast.worst
    return (
        f"Forecast: {duration(expected.wall_seconds)}, {usd(expected.usd)} expected "
        f"({duration(worst.wall_seconds)}, {usd(worst.usd)} without early stopping); "
        f"{t.step_seconds * 1000:.0f} ms a step, {t.eval_seconds * 1000:.0f} ms an evaluation, "
        f"{t.setup_seconds:.1f} s a trial start{_process_start(t)}{_generation(t)} ({t.source})"
        + (f"; includes {forecast.confirm_trials} confirmation trial(s) to max_steps" if forecast.confirm_trials else "")
    )


def forecast_lines(forecast: Forecast, unit: str) -> list[str]:
    """The forecast as lines for the terminal; `unit` names the accelerator-hours (GPU-hours
    or CPU core-hours)."""
    t, rate, expected = forecast.timing, forecast.rate, forecast.expected
    ladder = ", ".join(f"{n} to step {step}" for step, n in forecast.ladder)
    label = "Expected"
    if forecast.bought_trials is not None:
        label = f"Expected ({forecast.bought_trials} trials)"
    elif expected != forecast.uncapped:
        share = expected.value(forecast.cut_by) / max(forecast.uncapped.value(forecast.cut_by), 1e-12)
        label = f"Expected (budget.{forecast.cut_by} stops it at about {share:.0%} of all its trials' expected work)"
    lines = [
        f"Step budget by rung: {ladder} ({expected.steps} steps; {forecast.worst.steps} without early stopping)",
        f"Step time: {t.step_seconds * 1000:.1f} ms per step, {t.eval_seconds * 1000:.0f} ms per evaluation, "
        f"{t.setup_seconds:.1f} s per trial start{_process_start(t)}{_generation(t)} ({t.source})",
        f"Price: {usd(rate.usd_per_hour)} per {unit.removesuffix('s')} ({rate.accelerator}), "
        f"{rate.accelerators_per_trial:g} per trial, {forecast.slots} trial(s) at once",
    ]
    if forecast.confirm_trials:
        lines.insert(1, f"Confirmation (search.confirm): {forecast.confirm_trials} trial(s) (top x seeds) to max_steps "
                        "after the search, counted in the steps above and the cases below")
    for label, s in ((label, expected), ("Without early stopping", forecast.worst)):
        lines.append(f"{label}: {duration(s.wall_seconds)} wall, {s.accelerator_hours:.4g} {unit}, {usd(s.usd)}")
    return lines + forecast.notes


def _process_start(timing: TrialTiming) -> str:
    """The once-per-slot start of a reused trial process, where trials run in one."""
    if not timing.process_start_seconds:
        return ""
    return f" (+{timing.process_start_seconds:.1f} s once per trial process)"


def _generation(timing: TrialTiming) -> str:
    """The generation pass, where the sweep has one, for the step-time lines."""
    if not timing.generation_seconds:
        return ""
    seconds = timing.generation_seconds
    shown = f"{seconds:.2g} s" if seconds < 60 else duration(seconds)
    return f", {shown} per generation pass ({timing.generation_prompts} prompts)"
