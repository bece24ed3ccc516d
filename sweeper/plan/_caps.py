"""What the `budget` caps mean before a sweep runs: against one trial's least cost (a cap
that cannot pay for a single trial is refused by the checks) and against the forecast
(`sweep plan` and `sweep start` print a line per cap)."""

from __future__ import annotations

from sweeper.cost import sweep_rate, modelled_timing
from sweeper.plan._forecast import Forecast, stretch_seconds
from sweeper.plan._sweep_plan import generation_steps
from sweeper.spec import BudgetSpec

__all__ = ["CAPS", "budget_problems", "budget_lines"]


# cap key -> the unit it counts in
CAPS: dict[str, str] = {
    "max_usd": "USD",
    "max_hours": "wall hours",
    "max_accelerator_hours": "accelerator-hours",
    "max_steps": "training steps",
}


def budget_problems(spec) -> list[tuple[str, str]]:
    """Keyed problems of `spec.budget`: a cap below the least one trial spends (its start
    and its steps to the first rung, or to max_steps without early stopping; in seconds
    and dollars from the throughput model) cannot run a single trial."""
    budget = spec.budget
    if budget is None:
        return []
    ranked = spec.early_stopping.scheduler in ("asha", "asha_stopping")
    first = spec.grace_period() if ranked else spec.training.max_steps
    why = "to its first rung (training.max_steps without early stopping)"
    least = {"max_steps": (first, f" trains {first} steps {why}")}
    try:
        rate = sweep_rate(spec)
        timing = modelled_timing(spec, rate.accelerator, rate.accelerators_per_trial)
    except KeyError:  # an unknown accelerator is reported by its own check
        timing = None
    if timing is not None:
        training = spec.training
        seconds = timing.setup_seconds + stretch_seconds(
            timing, 0, first, training.eval_every, training.max_steps, generation_steps(spec)
        )
        cost = rate.trial_cost(seconds)
        costs = "'s start and first-rung steps cost about"
        least["max_usd"] = (cost.usd, f"{costs} ${cost.usd:.6f} (throughput model, sweep plan --no-calibrate)")
        least["max_hours"] = (seconds / 3600, f"{costs} {seconds / 3600:.6f} h ({seconds:.1f} s)")
        hours = cost.accelerator_hours
        least["max_accelerator_hours"] = (hours, f"{costs} {hours:.6f} accelerator-hours")
    problems = []
    for key, cap in budget.caps().items():
        floor, spends = least.get(key, (0, ""))
        if cap < floor:
            problems.append((f"budget.{key}", f"one trial{spends}, got {cap:g}; raise it or leave it out"))
    return problems


def budget_lines(budget: BudgetSpec, forecast: Forecast) -> list[str]:
    """What each cap means against the forecast, for `sweep plan` and `sweep start`; for
    a sweep that runs until a cap, what the caps buy first."""
    lines = []
    if forecast.bought_trials is not None:
        max_steps, at_end = forecast.ladder[-1]
        ends = f"budget.{forecast.cut_by} ends it" if forecast.cut_by else "no cap binds within the trials counted"
        lines.append(
            f"Budget buys: about {forecast.bought_trials} trials, {at_end} of them to step {max_steps} "
            f"({forecast.expected.steps} training steps); {ends}"
        )
    for key, cap in budget.caps().items():
        expected, worst = forecast.uncapped.value(key), forecast.worst.value(key)
        # Either case may be the larger (sweeper/plan/_forecast.py): the sweep fits whole
        # only where both do.
        verdict = (
            "the whole sweep fits" if max(expected, worst) <= cap
            else "the expected sweep fits; without early stopping it would be cut" if expected <= cap
            else "the sweep is expected to be cut by it"
        )
        lines.append(
            f"Budget {key}: {cap:g} {CAPS[key]} against {expected:.4g} expected, "
            f"{worst:.4g} without early stopping: {verdict}"
        )
    return lines
