"""What the `budget` caps mean before a sweep runs: against one trial's least cost (a cap
that cannot pay for a single trial is refused by the checks) and against the forecast
(`sweep plan` and `sweep start` print a line per cap)."""

from __future__ import annotations

from sweeper.cost import sweep_rate, modelled_timing
from sweeper.plan._forecast import Forecast
from sweeper.plan._rungs import evaluations_between
from sweeper.spec import BudgetSpec

__all__ = ["CAPS", "budget_problems", "budget_lines", "first_trial_cost", "first_trial_steps"]


# cap key -> the unit it counts in
CAPS: dict[str, str] = {
    "max_usd": "USD",
    "max_hours": "wall hours",
    "max_accelerator_hours": "accelerator-hours",
    "max_steps": "training steps",
}


def budget_problems(spec) -> list[tuple[str, str]]:
    """Keyed problems of `spec.budget`: a cap smaller than the least one trial spends (its
    start and the steps to the first rung, from the throughput model, which needs no
    measurement) cannot run a single trial."""
    budget = spec.budget
    if budget is None:
        return []
    problems = []
    first = first_trial_steps(spec)
    if budget.max_steps is not None and budget.max_steps < first:
        problems.append((
            "budget.max_steps",
            f"one trial trains {first} steps to its first rung (training.max_steps without early stopping), got "
            f"{budget.max_steps}; raise it or leave it out",
        ))
    least = first_trial_cost(spec)
    if least is None:
        return problems
    seconds, usd = least
    accelerator_hours = sweep_rate(spec).trial_cost(seconds).accelerator_hours
    floors = {
        "max_usd": (usd, f"${usd:.6f} (throughput model, sweep plan --no-calibrate)"),
        "max_hours": (seconds / 3600, f"{seconds / 3600:.6f} h ({seconds:.1f} s)"),
        "max_accelerator_hours": (accelerator_hours, f"{accelerator_hours:.6f} accelerator-hours"),
    }
    for key, (floor, text) in floors.items():
        cap = getattr(budget, key)
        if cap is not None and cap < floor:
            problems.append((
                f"budget.{key}",
                f"one trial's start and first-rung steps cost about {text}, got {cap:g}; raise it or leave it out",
            ))
    return problems


def budget_lines(budget: BudgetSpec, forecast: "Forecast") -> list[str]:
    """What each cap means against the forecast, for `sweep plan` and `sweep start`; for
    a sweep that runs until a cap, what the caps buy."""
    if forecast.bought_trials is not None:
        return _bought_lines(budget, forecast)
    # Against all the trials (the expected case is cut at the cap that stops them first).
    expected, worst = forecast.uncapped or forecast.expected, forecast.worst
    lines = []
    for key, cap in budget.caps().items():
        expected_value, worst_value = expected.value(key), worst.value(key)
        verdict = (
            "the whole sweep fits"
            if worst_value <= cap
            else "the expected sweep fits; without pruning it would be cut"
            if expected_value <= cap
            else "the sweep is expected to be cut by it"
        )
        lines.append(
            f"Budget {key}: {cap:g} {CAPS[key]} against {expected_value:.4g} expected, {worst_value:.4g} worst case: {verdict}"
        )
    return lines


def _bought_lines(budget: BudgetSpec, forecast: "Forecast") -> list[str]:
    """What a sweep without search.num_trials gets for its caps: the expected trials, how
    many reach max_steps, the cap that ends it, and each cap against that expected case."""
    ladder, expected = forecast.ladder, forecast.expected
    max_steps, at_end = ladder[-1]
    caps = budget.caps()
    short = [key for key, cap in caps.items() if expected.value(key) > cap]
    if short:  # not even one trial's ladder fits
        ends = f"budget.{short[0]} stops it before that one trial reaches step {max_steps}"
    elif forecast.binding_cap:
        ends = f"budget.{forecast.binding_cap} ends it (one more trial's expected ladder would cross it)"
    else:
        ends = "no cap binds within the trials counted"
    lines = [
        f"Budget buys: about {forecast.bought_trials} trials, {at_end} of them to step {max_steps} "
        f"({expected.steps} training steps); {ends}; without early stopping it would buy "
        f"{forecast.bought_full_trials} trial(s) to step {max_steps}"
    ]
    for key, cap in caps.items():
        lines.append(
            f"Budget {key}: {cap:g} {CAPS[key]}; those {forecast.bought_trials} trials: {expected.value(key):.4g} expected"
        )
    return lines


def first_trial_steps(spec) -> int:
    """Steps one trial trains at least: to the first rung (to max_steps without early stopping)."""
    if spec.early_stopping.scheduler in ("asha", "asha_stopping"):
        return spec.grace_period()
    return spec.training.max_steps


def first_trial_cost(spec) -> tuple[float, float] | None:
    """(seconds, USD) of the least a trial spends, from the throughput model: its start and
    the steps to the first rung (to max_steps without early stopping). None when the
    model's size is unknown. Budgets smaller than this cannot run one trial."""
    try:
        rate = sweep_rate(spec)
    except KeyError:
        return None  # an unknown accelerator is reported by its own check
    timing = modelled_timing(spec, rate.accelerator, rate.accelerators_per_trial)
    if timing is None:
        return None
    training = spec.training
    first = first_trial_steps(spec)
    evaluations = evaluations_between(0, first, training.eval_every, training.max_steps)
    seconds = timing.setup_seconds + first * timing.step_seconds + evaluations * timing.eval_seconds
    return seconds, rate.trial_cost(seconds).usd
