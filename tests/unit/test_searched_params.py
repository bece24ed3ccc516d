"""The sweep's parent run logs a searched field as searched, with its distribution, and
the report's config differences compare what sweeps searched, not base values no trial
trained with."""

from __future__ import annotations

import json

from reports.frames import config_diff
from sweeper.spec._load import read_yaml, validate_spec
from sweeper.track._mlflow_store import SEARCHED_PREFIX, flat_params
from tests.unit.test_reports import make_sweep
from benchmarks.common import QUICKSTART


def quickstart(**training) -> dict:
    raw = read_yaml(QUICKSTART)
    raw["training"].update(training)
    return raw


def params_of(raw: dict) -> dict[str, str]:
    """The parent run's params, less `name` (which make_sweep sets)."""
    params = flat_params(validate_spec(raw, base_dir=QUICKSTART.parent))
    del params["name"]
    return params


def test_a_searched_field_is_logged_with_its_distribution_not_its_base_value():
    params = params_of(quickstart(learning_rate=2e-4))
    logged = params["training.learning_rate"]
    assert logged.startswith(SEARCHED_PREFIX)
    assert json.loads(logged.removeprefix(SEARCHED_PREFIX)) == {"distribution": "log_uniform", "low": 1e-4, "high": 3e-2}
    assert params["training.max_steps"] == "90"  # fixed fields keep their value


def test_defaults_that_depend_on_other_fields_are_logged_as_the_sweep_used_them():
    params = params_of(quickstart(max_steps=2000, eval_every=100))
    assert params["early_stopping.grace_period"] == "100"  # max_steps / 27 on an evaluation
    assert params["early_stopping.reduction_factor"] == "4.0"  # asha's default: the screen keeps a quarter
    assert params["early_stopping.startup_trials"] == "0"
    assert params["early_stopping.rung_spacing"] == "4.0"  # reduction_factor's
    assert params["early_stopping.rungs"] == "1"
    every_rung = quickstart(max_steps=2000, eval_every=100)
    every_rung["early_stopping"] = {"scheduler": "asha", "reduction_factor": 3, "rungs": "all"}
    params = params_of(every_rung)
    assert (params["early_stopping.reduction_factor"], params["early_stopping.rungs"]) == ("3.0", "all below max_steps")


def test_config_differences_ignore_the_base_value_of_a_searched_field():
    one, other = params_of(quickstart(learning_rate=2e-4)), params_of(quickstart(learning_rate=5e-3))
    assert config_diff([make_sweep("one", **one), make_sweep("other", **other)]).height == 0

    wider = quickstart()
    wider["search"]["parameters"]["training.learning_rate"]["high"] = 0.1
    diff = config_diff([make_sweep("one", **one), make_sweep("wider", **params_of(wider))])
    assert diff["key"].to_list() == ["search.parameters", "training.learning_rate"]
