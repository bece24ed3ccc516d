"""Parameter importance with Optuna's evaluators over a sweep's completed trials.

The trials are rebuilt as an in-memory Optuna study from what MLflow holds (the sampled
values and the final metric) and the search space recorded with the sweep, so a report
needs neither the sweep folder nor its optuna.db. Pruned trials are left out: their
metric comes from fewer steps and would be ranked beside full-length ones.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import optuna
import polars as pl

from sweeper.names import TrialState
from sweeper.search import parameters_to_optuna

__all__ = ["Importance", "param_importance", "MIN_COMPLETED_TRIALS"]

MIN_COMPLETED_TRIALS = 3
# The most completed trials the evaluators read: fANOVA's time grows faster than the
# trials, and a few hundred rank a sweep's parameters as all of them do; beyond, a
# seeded random sample of this many, which the report's note names.
MOST_TRIALS_EVALUATED = 200
# fANOVA's forest: Optuna's default 64 trees up to this many trials, 16 above. Its time
# grows with trees x trials; on the 2,000-trial benchmark's 200-trial sample 16 trees took
# a quarter of 64's time (1.3 s against 5.2 s, the machine loaded) and ranked the three
# parameters alike, each importance within 0.03 (benchmarks/README.md, Load).
FULL_FOREST_TRIALS = 100
SMALL_FOREST_TREES = 16
EVALUATORS = {
    "fANOVA": lambda trials: optuna.importance.FanovaImportanceEvaluator(
        seed=0, n_trees=64 if trials <= FULL_FOREST_TRIALS else SMALL_FOREST_TREES
    ),
    "PED-ANOVA": lambda trials: optuna.importance.PedAnovaImportanceEvaluator(),
}


@dataclass(frozen=True)
class Importance:
    frame: pl.DataFrame | None  # evaluator, parameter, importance (sums to 1 per evaluator)
    note: str  # what was computed from what, or why nothing was


def param_importance(trials: pl.DataFrame, search_space: dict[str, dict], goal: str) -> Importance:
    """`trials`: SweepStore.trials (state, metric, params as JSON); `search_space`: the
    sweep's search.parameters as in its YAML."""
    if len(search_space) < 2:
        return Importance(None, f"{len(search_space)} parameter searched: importance needs at least 2 to compare.")
    distributions = parameters_to_optuna(search_space)
    completed = trials.filter((pl.col("state") == TrialState.COMPLETED) & pl.col("metric").is_not_null())
    frozen = [
        trial
        for params, value in zip(completed["params"], completed["metric"])
        if (trial := _frozen_trial(json.loads(params), value, distributions)) is not None
    ]
    if len(frozen) < MIN_COMPLETED_TRIALS:
        return Importance(
            None, f"{len(frozen)} completed trial(s): importance needs at least {MIN_COMPLETED_TRIALS}."
        )
    over, how = f"{len(frozen)} completed trials", []
    if len(frozen) > MOST_TRIALS_EVALUATED:
        over, how = f"{MOST_TRIALS_EVALUATED} of {len(frozen)} completed trials", ["a seeded random sample"]
        frozen = random.Random(0).sample(frozen, MOST_TRIALS_EVALUATED)
    if len(frozen) > FULL_FOREST_TRIALS:
        how.append(f"fANOVA with {SMALL_FOREST_TREES} trees")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=goal)
    study.add_trials(frozen)
    rows = []
    for evaluator_name, make in EVALUATORS.items():
        scores = optuna.importance.get_param_importances(study, evaluator=make(len(frozen)), normalize=True)
        rows += [
            {"evaluator": evaluator_name, "parameter": name, "importance": float(score)}
            for name, score in scores.items()
        ]
    frame = pl.DataFrame(rows, schema={"evaluator": pl.String, "parameter": pl.String, "importance": pl.Float64})
    how = f" ({'; '.join(how)})" if how else ""
    return Importance(frame, f"Optuna's {' and '.join(EVALUATORS)} evaluators over {over}{how}.")


def _frozen_trial(params: dict[str, str], value: float, distributions: dict) -> optuna.trial.FrozenTrial | None:
    """A completed Optuna trial from MLflow's string params; None if a value is missing or
    outside the recorded space (a sweep whose space changed under the same name)."""
    typed = {}
    for name, distribution in distributions.items():
        if name not in params:
            return None
        typed[name] = _typed(params[name], distribution)
        if typed[name] is None:
            return None
    return optuna.trial.create_trial(params=typed, distributions=distributions, value=value)


def _typed(text: str, distribution):
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return next((choice for choice in distribution.choices if str(choice) == text), None)
    value = int(float(text)) if isinstance(distribution, optuna.distributions.IntDistribution) else float(text)
    return value if distribution.low <= value <= distribution.high else None
