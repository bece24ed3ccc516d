"""Specs the service builds from the user's, each validated again: an exported trial, a
single full run of one trial's values, a calibration run. Each builder names what it
builds, so a spec that cannot be turned into that run is a keyed line (UserError)."""

from __future__ import annotations

from typing import Any

from sweeper.spec._load import revalidate_spec
from sweeper.spec._paths import set_path
from sweeper.spec._schema import evaluates_on_start, SweepSpec


def with_overrides(spec: SweepSpec, overrides: dict[str, Any], built: str = "a run built from the sweep's YAML") -> SweepSpec:
    """The whole spec with dotted-path values applied and validated again (on the driver:
    exports and single runs; a trial applies its values with `TrialConfig.with_values`)."""
    raw = spec.model_dump(mode="python")
    for path, value in overrides.items():
        set_path(raw, path, value)
    return revalidate_spec(raw, built)


# The early_stopping section of a run that is no sweep (a single full run, a calibration
# run): nothing stopped early, and no startup trials, rung spacing or rung count (refused under
# scheduler none).
NO_EARLY_STOPPING = {"scheduler": "none", "startup_trials": None, "rung_spacing": None, "rungs": None}

# The search section of a run that is one trial: the sweep's own count may be absent (a
# budget-driven sweep), its cap is not this run's, one trial is one trial, and there is nothing to confirm.
ONE_TRIAL = {"num_trials": 1, "max_concurrent_trials": None, "warm_start": [], "confirm": None}


def single_run_spec(spec: SweepSpec, params: dict[str, Any], name: str) -> SweepSpec:
    """A complete config that trains one trial's values (`params`: dotted path -> value, as
    sampled or as MLflow stored them) as a single full run: nothing searched or stopped
    early, output in ./sweeps/<name>. best_config.yaml and `sweep export` are this."""
    # Validated once, with nothing searched: a trial's conditional values (trl.simpo_gamma
    # of trl.method simpo) are not valid for the other values of the search.
    raw = spec.model_dump(mode="python")
    for path, value in params.items():
        set_path(raw, path, value)
    raw["name"] = name
    raw["search"] = {**raw["search"], **ONE_TRIAL, "parameters": {}}
    raw["early_stopping"] = {**raw["early_stopping"], **NO_EARLY_STOPPING}
    raw["output_dir"] = None
    return revalidate_spec(raw, f"the single run {name} built from the sweep's YAML")


def calibration_spec(spec: SweepSpec, steps: int, accumulation: int, values: dict[str, Any] | None = None) -> SweepSpec:
    """The run that calibration times: `values` (dotted path -> value; none: the spec's own
    config) trained for `steps` steps with one evaluation after the last, at
    `accumulation` micro-batches a step; one trial, no early stopping, no fault, no budget
    (the sweep's budget is not this run's), no evaluation before the first step."""
    return with_overrides(
        spec,
        {
            **(values or {}),
            "training.max_steps": steps,
            "training.eval_every": steps,
            "training.gradient_accumulation_steps": accumulation,
            **{f"early_stopping.{key}": value for key, value in NO_EARLY_STOPPING.items()},
            **{f"search.{key}": value for key, value in ONE_TRIAL.items()},
            "chaos.fault": "none",
            "budget": None,
            # No evaluation before the first step: one report, after the last step.
            **({"trl.eval_on_start": False} if evaluates_on_start(spec) else {}),
        },
        built="the calibration run built from the sweep's YAML",
    )
