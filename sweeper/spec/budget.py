"""The `budget` section: caps on what a sweep may spend. What they mean against the
forecast and one trial's least cost is sweeper/plan/budget.py; what enforces them while
the sweep runs is sweeper/run/budget_guard.py."""

from __future__ import annotations

from pydantic import Field

from trainables.sections import StrictModel

__all__ = ["BudgetSpec"]


class BudgetSpec(StrictModel):
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
    max_steps: int | None = Field(
        None,
        ge=1,
        description="Cap on training steps (optimizer steps summed over the sweep's trials), enforced the same way: "
        "running trials stop within one evaluation interval of it.",
    )

    def caps(self) -> dict[str, float]:
        """The caps given: key -> value. (A guard that Tune pickled before a cap was added
        to this schema comes back without its field: not given.)"""
        caps = {key: getattr(self, key, None) for key in type(self).model_fields}
        return {key: value for key, value in caps.items() if value is not None}


