"""Values set on a whole spec by dotted path, validated again: an exported trial, a
single full run of one trial's values, a calibration run."""

from __future__ import annotations

from typing import Any

from sweeper.spec.paths import set_path
from sweeper.spec.schema import SweepSpec


def with_overrides(spec: SweepSpec, overrides: dict[str, Any]) -> SweepSpec:
    """The whole spec with dotted-path values applied and validated again (on the driver:
    exports and single runs; a trial applies its values with `TrialConfig.with_values`)."""
    raw = spec.model_dump(mode="python")
    for path, value in overrides.items():
        set_path(raw, path, value)
    return SweepSpec.model_validate(raw, context={"check_files": False})


# The early_stopping section of a run that is no sweep (a single full run, a calibration
# run): nothing stopped early, and no startup trials, rung spacing or rung count (refused under
# scheduler none).
NO_EARLY_STOPPING = {"scheduler": "none", "startup_trials": None, "rung_spacing": None, "rungs": None}


def single_run_spec(spec: SweepSpec, params: dict[str, Any], name: str) -> SweepSpec:
    """A complete config that trains one trial's values (`params`: dotted path -> value, as
    sampled or as MLflow stored them) as a single full run: nothing searched or stopped
    early, output in ./sweeps/<name>. best_config.yaml and `sweep export` are this."""
    raw = with_overrides(spec, params).model_dump(mode="python")
    raw["name"] = name
    raw["search"] = {
        **raw["search"], "parameters": {}, "num_trials": 1, "max_concurrent_trials": None, "warm_start": [],
    }
    raw["early_stopping"] = {**raw["early_stopping"], **NO_EARLY_STOPPING}
    raw["output_dir"] = None
    return SweepSpec.model_validate(raw, context={"check_files": False})
