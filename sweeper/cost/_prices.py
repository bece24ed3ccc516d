"""Cost arithmetic: what a trial and a sweep cost, and what pruning saved. Pure functions.

A trial's accelerator-hours are its wall time (setup included) x workers x accelerators
per worker (CPU cores when it uses no GPU); its cost is that x the price per
accelerator-hour. A pruned trial's saving is what it would have cost at the full step
budget, at its own measured step rate, minus what it used.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.spec import PRICE_TABLE

__all__ = [
    "PRICE_TABLE", "TrialCost", "trial_cost", "pruning_saving", "SweepCost", "sweep_cost", "price_per_hour",
    "accelerators_per_trial", "Rate", "sweep_rate", "RAY_ACCELERATOR_TYPES", "priced_on_cluster",
]

# Ray's names for the NVIDIA cards it detects (a node's `accelerator_type:` resource) and
# the price-table key of each; Ray does not tell the two A100 sizes apart.
RAY_ACCELERATOR_TYPES = {"A10G": "a10g", "L4": "l4", "L40S": "l40s", "A100": "a100-80gb", "H100": "h100", "H200": "h200"}


def priced_on_cluster(spec, ray_types: set[str]):
    """`spec` priced by the card its trials run on: where the cluster's GPU nodes report
    one type of card that the price table knows (`ray_types`, Ray's names) and
    cost.accelerator prices another (a sweep written for an A10G, run on H100s), its
    cost.accelerator becomes that card's key; with the line that says so, else None.
    Unchanged: a CPU sweep, one whose cost.usd_per_hour fixes the price, a cluster of no
    or several known types, an A100 that cost.accelerator names by either size."""
    keys = {RAY_ACCELERATOR_TYPES[name] for name in ray_types if name in RAY_ACCELERATOR_TYPES}
    if not spec.resources.use_gpu or spec.cost.usd_per_hour is not None or len(keys) != 1:
        return spec, None
    (key,) = keys
    stated = spec.cost.resolved_accelerator(True)
    if stated == key or (key.startswith("a100") and stated.startswith("a100")):
        return spec, None
    cost = spec.cost.model_copy(update={"accelerator": key})
    usd = price_per_hour(key, None, spec.cost.prices)
    line = (f"Cost: priced as {key} at {usd:g} USD per GPU-hour, the cluster's GPUs (cost.accelerator is "
            f"{stated}; set cost.usd_per_hour to fix a price)")
    return spec.model_copy(update={"cost": cost}), line


def price_per_hour(accelerator: str, usd_per_hour: float | None, prices: dict[str, float]) -> float:
    if usd_per_hour is not None:
        return usd_per_hour
    return {**PRICE_TABLE, **prices}[accelerator]


def accelerators_per_trial(resources) -> float:
    """What a trial's hours are counted in (`resources`: the spec's section): the GPUs of
    the whole trial (workers x GPUs per worker), or its CPU cores when it uses no GPU."""
    per_worker = resources.gpus_per_worker if resources.use_gpu else resources.cpus_per_worker
    return resources.workers_per_trial * per_worker


@dataclass(frozen=True)
class Rate:
    """What one second of one trial costs: the trial's accelerators at the sweep's price.
    The one rule for accelerators x hours x price: the forecast, the budget check and
    guard, and the tracker's trial costs all count with it."""

    accelerator: str  # the price table's name (cost.accelerator, or the default card)
    accelerators_per_trial: float
    usd_per_hour: float  # per accelerator

    def trial_cost(self, wall_seconds: float, tokens: float = 0.0) -> "TrialCost":
        return trial_cost(wall_seconds, self.accelerators_per_trial, self.usd_per_hour, tokens)


def sweep_rate(spec) -> Rate:
    """The sweep's rate from its `cost` and `resources` sections. Raises KeyError for an
    accelerator without a price (the schema refuses those, keyed `cost.accelerator`)."""
    accelerator = spec.cost.resolved_accelerator(spec.resources.use_gpu)
    usd_per_hour = price_per_hour(accelerator, spec.cost.usd_per_hour, spec.cost.prices)
    return Rate(accelerator, accelerators_per_trial(spec.resources), usd_per_hour)


@dataclass(frozen=True)
class TrialCost:
    accelerator_hours: float
    usd: float
    tokens: float

    @property
    def usd_per_million_tokens(self) -> float | None:
        return self.usd / self.tokens * 1e6 if self.tokens else None


def trial_cost(wall_seconds: float, accelerators: float, usd_per_hour: float, tokens: float) -> TrialCost:
    """`accelerators`: GPUs of the whole trial (workers x GPUs per worker), or CPU cores."""
    hours = wall_seconds / 3600 * accelerators
    return TrialCost(accelerator_hours=hours, usd=hours * usd_per_hour, tokens=tokens)


def pruning_saving(
    wall_seconds: float, setup_seconds: float, steps_done: int, max_steps: int, accelerators: float, usd_per_hour: float
) -> float:
    """USD a pruned trial did not spend: its setup plus max_steps at its measured seconds
    per step, minus what it used. Zero for a trial that ran its whole budget."""
    if steps_done <= 0 or steps_done >= max_steps:
        return 0.0
    seconds_per_step = max(0.0, wall_seconds - setup_seconds) / steps_done
    projected = setup_seconds + seconds_per_step * max_steps
    return max(0.0, projected - wall_seconds) / 3600 * accelerators * usd_per_hour


@dataclass(frozen=True)
class SweepCost:
    usd: float
    accelerator_hours: float
    tokens: float
    saved_by_pruning_usd: float

    @property
    def usd_per_million_tokens(self) -> float | None:
        return self.usd / self.tokens * 1e6 if self.tokens else None


def sweep_cost(trials: list[TrialCost], savings: list[float]) -> SweepCost:
    return SweepCost(
        usd=sum(t.usd for t in trials),
        accelerator_hours=sum(t.accelerator_hours for t in trials),
        tokens=sum(t.tokens for t in trials),
        saved_by_pruning_usd=sum(savings),
    )
