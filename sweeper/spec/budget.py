"""The `budget` section: caps on what a sweep may spend, and their check at validate time.

Importable without Ray (`sweep validate` reads it); what enforces the caps while the
sweep runs is sweeper/run/budget_guard.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from sweeper.plan.forecast import Forecast

__all__ = ["BudgetSpec", "budget_problems", "budget_lines", "CAPS"]


class BudgetSpec(BaseModel):
    """Unknown keys are errors, as in every section (sweeper/spec/schema.py's StrictModel, which
    this module cannot import: spec.py imports this one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_usd: float | None = Field(
        None,
        gt=0,
        description="Cap on the sweep's cost in USD (trials' wall time x accelerators x price): no trial starts "
        "whose work to its next rung would cross it, and running trials stop when it is reached.",
    )
    max_hours: float | None = Field(
        None, gt=0, description="Cap on the sweep's wall-clock hours (from its start), enforced the same way."
    )
    max_accelerator_hours: float | None = Field(
        None,
        gt=0,
        description="Cap on accelerator-hours (GPU-hours, or CPU core-hours without GPUs), enforced the same way.",
    )


# cap key -> (what it measures, unit formatter)
CAPS: dict[str, str] = {"max_usd": "USD", "max_hours": "wall hours", "max_accelerator_hours": "accelerator-hours"}


def budget_problems(spec) -> list[tuple[str, str]]:
    """Keyed problems of `spec.budget`: a cap smaller than the least one trial spends (its
    start and the steps to the first rung, from the throughput model, which needs no
    measurement) cannot run a single trial."""
    budget = spec.budget
    if budget is None:
        return []
    from sweeper.plan.forecast import first_trial_cost

    resources = spec.resources
    accelerators = resources.workers_per_trial * (
        resources.gpus_per_worker if resources.use_gpu else resources.cpus_per_worker
    )
    least = first_trial_cost(spec, accelerators)
    if least is None:
        return []
    seconds, usd = least
    trial = "one trial's start and first-rung steps cost about"
    problems = []
    if budget.max_usd is not None and budget.max_usd < usd:
        problems.append((
            "budget.max_usd",
            f"{trial} ${usd:.6f} (throughput model, sweep plan --no-calibrate), got "
            f"{budget.max_usd:g}; raise it or leave it out",
        ))
    if budget.max_hours is not None and budget.max_hours < seconds / 3600:
        problems.append((
            "budget.max_hours",
            f"{trial} {seconds / 3600:.6f} h ({seconds:.1f} s), got {budget.max_hours:g}; "
            "raise it or leave it out",
        ))
    accelerator_hours = seconds / 3600 * accelerators
    if budget.max_accelerator_hours is not None and budget.max_accelerator_hours < accelerator_hours:
        problems.append((
            "budget.max_accelerator_hours",
            f"{trial} {accelerator_hours:.6f} accelerator-hours, got "
            f"{budget.max_accelerator_hours:g}; raise it or leave it out",
        ))
    return problems


def budget_lines(budget: BudgetSpec, forecast: "Forecast") -> list[str]:
    """What each cap means against the forecast, for `sweep plan` and `sweep start`."""
    expected, worst = forecast.expected, forecast.worst
    figures = {
        "max_usd": (budget.max_usd, expected.usd, worst.usd),
        "max_hours": (budget.max_hours, expected.wall_seconds / 3600, worst.wall_seconds / 3600),
        "max_accelerator_hours": (budget.max_accelerator_hours, expected.accelerator_hours, worst.accelerator_hours),
    }
    lines = []
    for key, (cap, expected_value, worst_value) in figures.items():
        if cap is None:
            continue
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
