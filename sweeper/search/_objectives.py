"""Several objectives (search.objectives): the values a finished trial is told to Optuna's
multi-objective study with, its cost objectives worked out from the trial's wall time and
config, the Pareto front of finished trials, and the front as a sweep's study holds it
(`study_front`: `sweep status` and the report read it from the sweep folder; no Ray).

`pareto_front` is the one rule for "the front": `sweep status`, the report and the
promotion's check all call it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sweeper.spec import COST_METRICS

__all__ = ["Objectives", "objectives_of", "dominates", "pareto_front", "Front", "study_front"]

T = TypeVar("T")

# Tune's own result key: seconds the trial has run, over its segments.
TIME_TOTAL = "time_total_s"


@dataclass(frozen=True)
class Objectives:
    """The sweep's objectives in order, with what a cost objective is worked out from:
    the rate (accelerators a trial holds, price per accelerator-hour) and, for the
    adapter's parameters, the model's layers and the in + out size of each linear layer
    LoRA may adapt (empty where the model's config cannot be read here), with the
    sweep's own rank and target modules for a trial that does not sample them."""

    metrics: tuple[str, ...]
    goals: tuple[str, ...]
    accelerators_per_trial: float = 1.0
    usd_per_hour: float = 0.0
    layers: int = 0
    linear_sizes: tuple[tuple[str, int], ...] = ()
    lora_r: int = 8
    target_modules: tuple[str, ...] = ()

    @property
    def directions(self) -> list[str]:
        return list(self.goals)

    def adapter_parameters(self, params: Mapping) -> float | None:
        """LoRA parameters of a trial: rank x (in + out) of every adapted linear layer."""
        if not self.linear_sizes:
            return None
        rank = params.get("lora.r", self.lora_r)
        targets = params.get("lora.target_modules", self.target_modules)
        return float(self.layers * rank * sum(size for name, size in self.linear_sizes if name in targets))

    def values(self, result: Mapping, params: Mapping) -> list[float | None]:
        """Each objective's value for a trial whose last result is `result` and whose
        sampled values are `params`; None where it has none."""
        hours = result.get(TIME_TOTAL, 0.0) / 3600 * self.accelerators_per_trial
        derived = {"accelerator_hours": hours, "cost_usd": hours * self.usd_per_hour,
                   "adapter_parameters": self.adapter_parameters(params)}
        values = []
        for metric in self.metrics:
            value = derived[metric] if metric in COST_METRICS else result.get(metric)
            values.append(float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None)
        return values


def objectives_of(spec) -> Objectives | None:
    """The spec's search.objectives, priced by its cost section; None without them."""
    if not spec.search.objectives:
        return None
    from sweeper.cost import architecture_of, sweep_rate

    rate = sweep_rate(spec)
    arch = architecture_of(spec.model.name_or_path, from_hub=False)
    sizes = tuple((name, sum(shape)) for name, shape in arch.linear_shapes().items()) if arch else ()
    return Objectives(
        tuple(o.metric for o in spec.search.objectives), tuple(o.goal for o in spec.search.objectives),
        rate.accelerators_per_trial, rate.usd_per_hour, arch.layers if arch else 0, sizes,
        spec.lora.r, tuple(spec.lora.target_modules),
    )


def dominates(a: Sequence[float], b: Sequence[float], goals: Sequence[str]) -> bool:
    """True if `a` is at least as good as `b` in every objective and better in one."""
    signs = [1 if goal == "minimize" else -1 for goal in goals]
    pairs = [(s * x, s * y) for s, x, y in zip(signs, a, b, strict=True)]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def pareto_front(candidates: Sequence[T], values: Callable[[T], Sequence[float] | None], goals: Sequence[str]) -> list[T]:
    """The candidates no other candidate dominates, in their order; those without a full
    set of finite values are left out.

    >>> pareto_front([(1, 5), (2, 2), (3, 3), (5, 1)], lambda p: p, ["minimize", "minimize"])
    [(1, 5), (2, 2), (5, 1)]
    """
    scored = [(c, list(v)) for c in candidates
              if (v := values(c)) is not None and all(x is not None and math.isfinite(x) for x in v)]
    return [c for c, v in scored if not any(dominates(other, v, goals) for _, other in scored)]


@dataclass(frozen=True)
class Front:
    metrics: list[str]
    goals: list[str]
    points: list[tuple[str, list[float]]]  # (Tune trial id, values) of each completed trial
    front: list[str]  # the Tune trial ids on the Pareto front, in trial order


def study_front(sweep_dir: str | Path, name: str) -> Front | None:
    """The front of sweep `name`'s study in `sweep_dir`; None where the folder holds no
    study of several objectives (a single-objective sweep, a folder on another machine)."""
    import optuna

    from sweeper.search._study import STUDY_FILE, TUNE_TRIAL_ID_ATTR, study_url

    if not (Path(sweep_dir) / STUDY_FILE).is_file():
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=study_url(Path(sweep_dir)))
    except KeyError:  # no study of that name
        return None
    if len(study.directions) < 2:
        return None
    goals = ["minimize" if d == optuna.study.StudyDirection.MINIMIZE else "maximize" for d in study.directions]
    metrics = study.metric_names or [f"objective {i}" for i in range(len(goals))]
    points = [
        (t.user_attrs.get(TUNE_TRIAL_ID_ATTR, str(t.number)), list(t.values))
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    ]
    front = [trial_id for trial_id, _ in pareto_front(points, lambda p: p[1], goals)]
    return Front(metrics, goals, points, front)
