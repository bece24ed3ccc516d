"""Forecast: what a sweep will cost before it starts. Pure: a plan (its rung ladder,
slots and per-trial resources) and a trial timing (seconds per optimizer step, per
evaluation and per trial start) become expected and worst-case wall time,
accelerator-hours and dollars.

- Expected: what the ASHA ladder trains. For `asha` (ASHA by promotion) the ladder is
  known before launch (`SweepPlan.trials_per_milestone`); each segment between rungs is
  a Train run of its own (a promoted trial resumes from its checkpoint), so it pays one
  trial start, except for the startup trials (`early_stopping.startup_trials`), which
  train to max_steps in one run. For `asha_stopping` (Ray's ASHA) the same ladder is
  assumed, with one start per trial. `median` and `none` are assumed to prune nothing: expected = worst case.
- Worst case: every trial trains to `training.max_steps`.
- Wall time: the runs go to the slots as Tune starts them, a promoted run (once enough
  trials are ranked at its rung to promote it) before a new trial; between two
  trials a slot stands idle for a turnaround (the stopped trial's Train run is torn down,
  Tune's loop starts the next one on the reused actor).
- Without calibration, the throughput model (sweeper/cost/throughput.py) gives the timing.
- A sweep that runs until a budget cap (no search.num_trials): what the caps buy, the
  most trials whose expected case fits every cap (the ladder above for that many), and
  how many would fit without early stopping (the worst case). Each trial count's case is
  counted as for a sweep of that many trials.
- While the sweep runs, `remaining` is the same arithmetic from where the trials stand
  (sweeper/plan/live.py): the live forecast.

How a forecast reads on the terminal is sweeper/plan/forecast_lines.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sweeper.cost.prices import sweep_rate
from sweeper.cost.throughput import RayPart, TrialTiming
from sweeper.names import ForecastKey
from sweeper.plan.rungs import evaluations_between, milestone_counts, ranked_for
from sweeper.plan.slots import Segment, on_slots, with_idle_slots
from sweeper.plan.sweep_plan import SweepPlan
from sweeper.spec.sections import MOST_TRIALS

__all__ = [
    "Scenario", "Spread", "Forecast", "TrialAt", "forecast_sweep", "with_spread", "mean_of_configs", "dearer",
    "expected_ladder", "remaining", "most_trials_within", "within_caps", "share_within_caps", "ladder_as_run",
]


@dataclass(frozen=True)
class Scenario:
    steps: int  # training steps over all trials
    trial_seconds: float  # sum of the trials' wall times (what the cost counts)
    wall_seconds: float  # the sweep's wall time with the cluster's slots
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
class Spread:
    """How far the calibration's copies side by side were apart: the expected case at the
    fastest and at the slowest copy's figures (each figure's least and greatest)."""

    copies: int
    fastest: TrialTiming  # mean of the first and costliest config, as `Forecast.timing`
    slowest: TrialTiming
    low: Scenario  # the expected case at `fastest`
    high: Scenario


@dataclass(frozen=True)
class Forecast:
    timing: TrialTiming
    expected: Scenario
    worst: Scenario
    ladder: list[tuple[int, int]]  # (step, trials that train to it), expected case
    assumption: str  # what the expected case assumes about early stopping
    slots: int
    accelerators_per_trial: float
    accelerator: str
    usd_per_hour: float
    costliest: TrialTiming | None = None  # the dearest config's timing (worst case)
    notes: list[str] = field(default_factory=list)
    # A sweep that runs until a budget cap: the trials its expected case counts (the most
    # that fit every cap), the cap that one more would cross first, and the trials the
    # worst case counts (the most that fit without early stopping).
    bought_trials: int | None = None
    binding_cap: str | None = None
    bought_full_trials: int | None = None
    # A sweep of search.num_trials that a budget cap stops first: the expected case of all
    # its trials (`expected` is cut at the cap), and that cap.
    uncapped: Scenario | None = None
    cut_by: str | None = None
    measured_copies: int = 0  # calibration copies that measured the timing (0: the throughput model)
    spread: Spread | None = None  # across the calibration's copies (None: one copy, or modelled)
    # A calibrated forecast: the calibration's own timing (`timing` before this machine's
    # profile), the machine it is for, and what its profile applied (None: no profile yet).
    calibrated: TrialTiming | None = None
    machine: str | None = None
    machine_note: str | None = None
    ray_part: RayPart | None = None  # Ray's part measured on the cluster (no profile yet)

    def as_params(self) -> dict[str, str]:
        """The forecast as MLflow params of the parent run (`forecast_*`)."""
        t, e, w = self.timing, self.expected, self.worst
        return {
            ForecastKey.STEP_SECONDS: f"{t.step_seconds:.6g}",
            ForecastKey.EVAL_SECONDS: f"{t.eval_seconds:.6g}",
            ForecastKey.SETUP_SECONDS: f"{t.setup_seconds:.6g}",
            ForecastKey.COSTLIEST_STEP_SECONDS: f"{(self.costliest or t).step_seconds:.6g}",
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
            **({ForecastKey.RAY_PART: self.ray_part.line()[:500]} if self.ray_part is not None else {}),
        }

    def ending_metrics(self) -> dict[str, float]:
        """The totals logged again as metrics when the sweep ends, beside the actual cost. A
        sweep that runs until a budget cap has no worst case above its caps: its `worst`
        (what the caps buy without early stopping) is not logged as one."""
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
    max_steps = spec.training.max_steps
    scheduler = spec.early_stopping.scheduler
    counts = plan.trials_per_milestone(n)
    if counts is not None:
        return counts, "ASHA by promotion: the ladder is known before launch (failed trials only lower it)", True
    if scheduler == "asha_stopping" and spec.search.parameters:
        counts = milestone_counts(n, plan.rungs, max_steps, spec.early_stopping.reduction_factor_for())
        return counts, "Ray's ASHA (by stopping): assumed to follow the same ladder as ASHA by promotion", False
    why = {"median": "median stopping decides as results arrive: assumed to prune nothing"}.get(
        scheduler, "no early stopping"
    )
    return [(max_steps, n)], why, False


def ladder_as_run(plan: SweepPlan, steps: list[int]) -> list[tuple[int, int]]:
    """The expected ladder's milestones with the trials that trained into each segment, for
    trials that ended at `steps` (a sweep's actual ladder, to time it afterwards)."""
    milestones = [milestone for milestone, _ in expected_ladder(plan)[0]]
    previous = [0, *milestones[:-1]]
    return [(milestone, sum(1 for step in steps if step > before)) for milestone, before in zip(milestones, previous)]


@dataclass(frozen=True)
class TrialAt:
    """Where a trial of a running sweep stands, for what is left of it (`remaining`)."""

    step: int
    running: bool  # training now (not paused at a rung, not ended)
    unranked: bool = False  # a startup trial: climbs every rung in one Train run


def remaining(
    plan: SweepPlan,
    timing: TrialTiming,
    ladder: list[tuple[int, int]],
    restart_per_segment: bool,
    trials: list[TrialAt] = (),
) -> Scenario:
    """What is left of a sweep whose trials stand at `trials` (none: the whole sweep, the
    forecast before launch), by the ladder's segment arithmetic. Segment i (from the
    milestone before to milestone i) is trained by ladder[i] trials: those that reached
    milestone i have trained it, a running trial inside it trains the rest of it, and the
    trials still missing from the count train all of it, each paying a Train run's start
    where a new run begins (every trial's first segment; each later one of a ranked trial
    under ASHA by promotion).

    Wall time: each running trial holds a slot for the rest of its segment; the runs still
    to start go to the slot free first (sweeper/plan/slots.py), a promoted run before a new
    trial, as Tune starts them. A run of a later segment waits at its gate: under ASHA by
    promotion the k-th promotion from a rung waits until enough trials are ranked there to
    allow k (`ranked_for`), a startup trial's next segment for its own arrival; under
    Ray's ASHA a trial goes on as it arrives."""
    training = plan.spec.training
    slots = max(1, plan.concurrent_trials)
    start_seconds = timing.setup_seconds + timing.stop_seconds
    # Startup trials train every segment in one Train run: no restart after the first.
    unranked_total = plan.spec.early_stopping.startup_trials_for() if restart_per_segment else 0
    reduction_factor = plan.spec.early_stopping.reduction_factor_for()
    steps, trial_seconds = 0, 0.0
    segments = []
    previous = 0
    for index, (milestone, expected) in enumerate(ladder):
        evaluations = evaluations_between(previous, milestone, training.eval_every, training.max_steps)
        runs = 1 if (restart_per_segment or index == 0) else 0  # a new Train run
        reached = [t for t in trials if t.step >= milestone]
        inside = [t for t in trials if t.running and previous <= t.step < milestone]
        missing = max(0, expected - len(reached) - len(inside))
        unranked_in = sum(1 for t in reached + inside if t.unranked)
        unranked_left = max(0, unranked_total - unranked_in)
        starting = missing if index == 0 else runs * (missing - min(missing, unranked_left))
        full = (milestone - previous) * timing.step_seconds + evaluations * timing.eval_seconds
        rest = [
            (milestone - t.step) * timing.step_seconds
            + evaluations_between(t.step, milestone, training.eval_every, training.max_steps) * timing.eval_seconds
            for t in inside
        ]
        steps += missing * (milestone - previous) + sum(milestone - t.step for t in inside)
        trial_seconds += missing * full + starting * start_seconds + sum(rest)
        gates = None
        if index > 0:  # the trials at the milestone where it begins, and those still to come
            arrived, arrivals = segments[-1].arrived, ladder[index - 1][1]
            goes_on = missing if not restart_per_segment else min(missing, unranked_left)
            promoted = len(reached) + len(inside) - unranked_in
            gates = [arrived + k for k in range(1, goes_on + 1)] + [
                unranked_total + ranked_for(promoted + k, reduction_factor) for k in range(1, missing - goes_on + 1)
            ]
            gates = [min(gate, arrivals) for gate in gates]  # a closing rung lets the last go on
        # A missing run on its slot: its start, its steps, the slot's turnaround.
        seconds = runs * (start_seconds + timing.turnaround_seconds) + full
        segments.append(Segment(rest, seconds, missing, arrived=len(reached), gates=gates))
        previous = milestone
    if not trials:  # nothing started yet: the first wave of trials starts cold
        trial_seconds += min(slots, ladder[0][1]) * timing.cold_start_seconds
    end, runs = on_slots(segments, slots, timing.cold_start_seconds if not trials else 0.0)
    wall, faster = with_idle_slots(end, runs, slots, timing.alone_ratio)
    trial_seconds -= faster
    wall *= timing.wall_ratio
    cost = sweep_rate(plan.spec).trial_cost(trial_seconds)
    return Scenario(steps, trial_seconds, wall, cost.accelerator_hours, cost.usd)


NOTHING_SPENT = Scenario(0, 0.0, 0.0, 0.0, 0.0)


def within_caps(left: Scenario, caps: dict[str, float], slots: int, spent: Scenario = NOTHING_SPENT) -> Scenario:
    """`left`, cut where a budget cap ends the sweep first. The budget guard starts no trial
    and lets none go on whose work would cross a cap, so a sweep of more trials than its cap
    buys ends near the cap (`benchmarks.forecast --sweep long-capped`, three runs: 99-100% of
    it spent), while its ladder counts every trial: their ETA read 3 to 6.6 times the time
    actually left. The work is scaled by the share of `left` that fits under the tightest
    cap; it runs on full slots until the cap (the trials beyond it never start), so its wall
    time is its trials' time over the `slots`, not a share of the whole ladder's wall, whose
    end has fewer trials running: with that share the ETA read 7-16 % high (session 23,
    three runs). A wall-hours cap that binds leaves exactly its own share."""
    share, cap = share_within_caps(left, caps, spent)
    if share >= 1.0:
        return left
    wall = left.wall_seconds * share if cap == "max_hours" else left.trial_seconds * share / max(1, slots)
    return Scenario(
        round(left.steps * share), left.trial_seconds * share, wall, left.accelerator_hours * share, left.usd * share,
    )


def share_within_caps(
    left: Scenario, caps: dict[str, float], spent: Scenario = NOTHING_SPENT
) -> tuple[float, str | None]:
    """(share, cap): how much of `left` fits under what the tightest cap has left after
    `spent` (1.0 and None when all of it fits)."""
    share, tightest = 1.0, None
    for cap, limit in caps.items():
        wanted = left.value(cap)
        if wanted > 0 and (limit - spent.value(cap)) / wanted < share:
            share, tightest = max(0.0, limit - spent.value(cap)) / wanted, cap
    return share, tightest


def forecast_sweep(plan: SweepPlan, timing: TrialTiming, costliest: TrialTiming | None = None) -> Forecast:
    """Expected and worst-case cost of the sweep `plan`. `timing` is the first config's;
    `costliest` the dearest config's in the space: the worst case trains every trial at
    it, the expected case at the mean of the two (sampled configs lie between)."""
    spec = plan.spec
    costliest = dearer(timing, costliest)
    rate = sweep_rate(spec)
    mean = mean_of_configs(timing, costliest)
    bought = full = binding = None
    if plan.trials is None:  # until a budget cap: the most trials it buys
        open_plan, caps = plan, spec.budget.caps()

        def expected_case(n: int) -> Scenario:
            ladder, _, restarts = expected_ladder(open_plan.with_trials(n))
            return remaining(open_plan.with_trials(n), mean, ladder, restarts)

        def without_early_stopping(n: int) -> Scenario:
            return remaining(open_plan.with_trials(n), costliest, _full_ladder(open_plan, n), False)

        bought, binding = most_trials_within(caps, expected_case)
        full, _ = most_trials_within(caps, without_early_stopping)
        plan = plan.with_trials(bought)
    ladder, assumption, restarts = expected_ladder(plan)
    worst_plan = plan if full is None else plan.with_trials(full)
    # A cap that stops a sweep of search.num_trials first: the guard starts no trial past
    # it, so the sweep is expected to end there (the live estimate counts it so too).
    uncapped = remaining(plan, mean, ladder, restarts)
    _, cut_by = share_within_caps(uncapped, spec.budget.caps() if spec.budget else {})
    return Forecast(
        timing=mean,
        expected=within_caps(uncapped, spec.budget.caps(), plan.concurrent_trials) if cut_by else uncapped,
        uncapped=uncapped if cut_by else None,
        cut_by=cut_by,
        worst=remaining(worst_plan, costliest, _full_ladder(worst_plan, worst_plan.trials), False),
        ladder=ladder,
        assumption=assumption,
        slots=plan.concurrent_trials,
        accelerators_per_trial=rate.accelerators_per_trial,
        accelerator=rate.accelerator,
        usd_per_hour=rate.usd_per_hour,
        costliest=costliest,
        bought_trials=bought,
        binding_cap=binding,
        bought_full_trials=full,
    )


def _full_ladder(plan: SweepPlan, trials: int) -> list[tuple[int, int]]:
    """Every trial to max_steps: the worst case."""
    return [(plan.spec.training.max_steps, trials)]


def most_trials_within(caps: dict[str, float], scenario_for) -> tuple[int, str | None]:
    """(n, cap): the most trials whose scenario (`scenario_for(n)`) fits every cap, at
    least 1, and the cap that one more trial would cross first (None at MOST_TRIALS, the
    most a sweep takes: a cap that does not bind, such as a long wall-hours cap over a
    fast step). A scenario grows with its trial count: doubling, then
    bisection.

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
        if crossed(middle):
            high = middle
        else:
            low = middle
    return (MOST_TRIALS, None) if low >= MOST_TRIALS else (low, crossed(low + 1))


def dearer(first: TrialTiming, costliest: TrialTiming | None) -> TrialTiming:
    """The costliest config's timing, or the first's where the costliest's steps timed
    below it (noise on a busy machine)."""
    return max(costliest or first, first, key=lambda t: t.step_seconds)


def mean_of_configs(first: TrialTiming, costliest: TrialTiming) -> TrialTiming:
    """The expected case's timing: sampled configs lie between the first and the costliest."""
    return replace(
        first,
        step_seconds=(first.step_seconds + costliest.step_seconds) / 2,
        eval_seconds=(first.eval_seconds + costliest.eval_seconds) / 2,
        setup_seconds=(first.setup_seconds + costliest.setup_seconds) / 2,
    )


def with_spread(forecast: Forecast, plan: SweepPlan, copies: list[tuple[TrialTiming, TrialTiming]]) -> Forecast:
    """`forecast` (from the mean of `copies`, each copy's (first, costliest) timing) with
    how sure it is: the copies' spread, and how many measured it."""
    spread = None
    if forecast.bought_trials is not None:  # a sweep until a budget cap: the trials it buys
        plan = plan.with_trials(forecast.bought_trials)
    if len(copies) > 1:
        per_copy = [mean_of_configs(first, dearer(first, costliest)) for first, costliest in copies]
        ladder, _, restarts = expected_ladder(plan)

        def extreme(pick) -> TrialTiming:
            return replace(
                per_copy[0],
                step_seconds=pick(t.step_seconds for t in per_copy),
                eval_seconds=pick(t.eval_seconds for t in per_copy),
                setup_seconds=pick(t.setup_seconds for t in per_copy),
            )

        fastest, slowest = extreme(min), extreme(max)
        caps = plan.spec.budget.caps() if plan.spec.budget else {}
        spread = Spread(
            len(copies), fastest, slowest,
            within_caps(remaining(plan, fastest, ladder, restarts), caps, plan.concurrent_trials),
            within_caps(remaining(plan, slowest, ladder, restarts), caps, plan.concurrent_trials),
        )
    return replace(forecast, measured_copies=len(copies), spread=spread)
