"""What confirmation decides, as pure functions: the search's best `top` configs, the new
seeds each trains with, each config's mean over its seeds with a 95% t-interval, and the
winner by the mean.

A config is a search trial's values (dotted path -> value); confirmation runs of it are
the same values with `training.seed` set to each new seed. No Ray, no MLflow: the book
(on the driver) and the store's trial frame (`sweep status`, the report) both become
`Candidate` and `Rerun` lists here.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from trainables.sections import MAX_SEED

__all__ = [
    "SEED_PATH", "Candidate", "Rerun", "Confirmed", "Confirmation", "top_configs", "new_seeds",
    "mean_interval", "t_quantile", "confirm", "config_key",
]

# The trial field confirmation varies (trainables/sections.py: adapter init and data order).
SEED_PATH = "training.seed"

# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1..30; beyond
# 30 the table's last rows close in on the normal's 1.96 (interpolated in 1/df).
_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
_Z_975 = 1.959964


@dataclass(frozen=True)
class Candidate:
    """A search trial: its number, its values, its last value of the sweep's metric and the
    step it reached (max_steps, or the rung where early stopping left it)."""

    number: int
    params: dict[str, Any]
    value: float | None
    step: int = 0


@dataclass(frozen=True)
class Rerun:
    """A confirmation trial: the search trial it reruns, its seed, and its value of the
    metric once it completed (None while it runs, or when it was cut short or failed)."""

    confirms: int
    seed: int
    value: float | None
    number: int | None = None
    trial_id: str | None = None


@dataclass(frozen=True)
class Confirmed:
    """One confirmed config: its search trial, the values of its completed reruns by
    seed, their mean and the 95% interval of the mean (None with fewer than two values)."""

    candidate: Candidate
    values: dict[int, float]
    mean: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Confirmation:
    """The confirmation of a sweep: its configs in search order (best first), the winner
    by mean, and the trial promoted for it (the winner's rerun with the best value)."""

    metric: str
    goal: str
    seeds: list[int]
    rows: list[Confirmed]
    winner: Confirmed | None = None
    promoted: Rerun | None = None
    missing: list[Rerun] = field(default_factory=list)  # reruns without a value
    notes: list[str] = field(default_factory=list)  # why it was skipped or cut, in one line each

    def picked_by(self, sweep: str) -> str:
        """The comment that opens best_config.yaml when confirmation picked the winner."""
        winner, promoted = self.winner, self.promoted
        return (f"# Chosen by confirmation (search.confirm) in sweep {sweep}: the config with the best mean "
                f"{self.metric} ({self.goal}) over {len(self.seeds)} new seeds among the search's best {len(self.rows)}, "
                f"trial {winner.candidate.number}'s (mean {winner.mean:.6g}); these are the values of trial "
                f"{promoted.number}, its rerun with seed {promoted.seed}, which sweep promote registers by default.\n")

    @property
    def changed_winner(self) -> bool:
        """True when the mean picked another config than the search's single best trial."""
        return self.winner is not None and bool(self.rows) and self.winner is not self.rows[0]


def config_key(params: dict[str, Any]) -> tuple:
    """What makes two trials the same config: their values, the seed left out, compared as
    text (a resumed sweep's values come back from MLflow as text)."""
    return tuple(sorted((path, str(value)) for path, value in params.items() if path != SEED_PATH))


def _better(a: float, b: float, goal: str) -> bool:
    return a < b if goal == "minimize" else a > b


def top_configs(candidates: list[Candidate], goal: str, top: int) -> list[Candidate]:
    """The best `top` distinct configs among `candidates`, best first, as early stopping
    ranks them: the furthest step first (trials that reached max_steps, then those left at
    the highest rung), then the value under `goal` at it; a config tried twice counts once,
    by its best trial; ties go to the earlier trial (lower number); candidates without a
    finite value are left out."""
    scored = [c for c in candidates if c.value is not None and math.isfinite(c.value)]
    sign = 1.0 if goal == "minimize" else -1.0
    chosen: list[Candidate] = []
    seen: set[tuple] = set()
    for candidate in sorted(scored, key=lambda c: (-c.step, sign * c.value, c.number)):
        key = config_key(candidate.params)
        if key not in seen:
            seen.add(key)
            chosen.append(candidate)
        if len(chosen) == top:
            break
    return chosen


def new_seeds(search_seed: int, count: int) -> list[int]:
    """The `count` seeds every confirmed config trains with: the ones after the search's
    `training.seed` (wrapping past the largest seed), so none is the search's own and
    every config meets the same seeds."""
    return [(search_seed + offset) % (MAX_SEED + 1) for offset in range(1, count + 1)]


def t_quantile(df: int) -> float:
    """Student's t two-sided 95% quantile for `df` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T_975):
        return _T_975[df - 1]
    # 1/df interpolation between df=30 and the normal (df = infinity).
    return _Z_975 + (_T_975[-1] - _Z_975) * len(_T_975) / df


def mean_interval(values: list[float]) -> tuple[float, float | None]:
    """(mean, half-width of its 95% t-interval); the half-width is None for one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def confirm(candidates: list[Candidate], reruns: list[Rerun], metric: str, goal: str, top: int,
            seeds: list[int]) -> Confirmation:
    """The confirmation table: the best `top` configs of `candidates` (the search's
    trials), each with the values of its `reruns` by seed, mean and interval, and the
    winner: the best mean under `goal` among the configs whose every seed completed (ties:
    the better search value, then the earlier trial); the promoted trial is the winner's
    rerun with the best value (ties: the earlier seed)."""
    by_config: dict[int, dict[int, Rerun]] = {}
    for rerun in reruns:
        by_config.setdefault(rerun.confirms, {})[rerun.seed] = rerun
    rows, missing = [], []
    for candidate in top_configs(candidates, goal, top):
        done = by_config.get(candidate.number, {})
        values = {seed: done[seed].value for seed in seeds
                  if seed in done and done[seed].value is not None and math.isfinite(done[seed].value)}
        missing += [done.get(seed) or Rerun(candidate.number, seed, None) for seed in seeds if seed not in values]
        if values:
            mean, half = mean_interval(list(values.values()))
            low, high = (None, None) if half is None else (mean - half, mean + half)
        else:
            mean = low = high = None
        rows.append(Confirmed(candidate, values, mean, low, high))
    whole = [row for row in rows if len(row.values) == len(seeds) and row.mean is not None]
    winner = None
    for row in whole:  # rows are in search order: a tie keeps the better search value
        if winner is None or _better(row.mean, winner.mean, goal):
            winner = row
    promoted = None
    if winner is not None:
        runs = by_config[winner.candidate.number]
        best_seed = None
        for seed in seeds:
            if best_seed is None or _better(winner.values[seed], winner.values[best_seed], goal):
                best_seed = seed
        promoted = runs[best_seed]
    return Confirmation(metric, goal, list(seeds), rows, winner, promoted, missing)
