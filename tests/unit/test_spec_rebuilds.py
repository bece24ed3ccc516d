"""Every spec the service builds from the user's (the calibration run, the costliest
config's calibration run, a single full run / export, the stored sweep.yaml read back, a
warm start's earlier sweep) builds from each shape of user spec: with and without
`search.num_trials`, with each budget cap. What cannot be built is a keyed UserError."""

from __future__ import annotations

import pytest

from sweeper.errors import UserError
from sweeper.search._warm_start import _earlier_trial_config
from sweeper.spec._load import parse_yaml, revalidate_spec, spec_to_yaml, validate_spec
from sweeper.spec._overrides import calibration_spec, single_run_spec, with_overrides
from tests.conftest import REPO, small_sweep

CAPS = {
    "max_usd": 5.0,
    "max_hours": 2.0,
    "max_accelerator_hours": 3.0,
    "max_steps": 300,
}
SHAPES = [
    pytest.param(10, None, id="num_trials"),
    *[pytest.param(10, {cap: value}, id=f"num_trials+{cap}") for cap, value in CAPS.items()],
    # budget-driven: no trial count, trials come until the cap
    *[pytest.param(None, {cap: value}, id=f"budget-driven+{cap}") for cap, value in CAPS.items()],
]


def user_spec(num_trials, budget):
    raw = small_sweep("shape", cost={"calibrate": True})
    raw["search"]["num_trials"] = num_trials
    raw["search"]["parameters"]["lora.r"] = {"distribution": "categorical", "values": [4, 8]}
    if budget is not None:
        raw["budget"] = budget
    return validate_spec(raw, base_dir=REPO)


@pytest.mark.parametrize("num_trials, budget", SHAPES)
def test_calibration_runs_build_from_every_shape(num_trials, budget):
    spec = user_spec(num_trials, budget)
    run = calibration_spec(spec, steps=5, accumulation=1)
    assert (run.training.max_steps, run.training.eval_every) == (5, 5)  # one evaluation, after the last step
    assert run.search.num_trials == 1 and run.budget is None
    assert run.early_stopping.scheduler == "none"
    costliest = calibration_spec(spec, steps=5, accumulation=1, values={"lora.r": 8})
    assert costliest.lora.r == 8


@pytest.mark.parametrize("num_trials, budget", SHAPES)
def test_single_runs_and_stored_specs_build_from_every_shape(num_trials, budget):
    spec = user_spec(num_trials, budget)
    single = single_run_spec(spec, {"training.learning_rate": 1e-3, "lora.r": 4}, name="shape-trial-3")
    assert single.search.num_trials == 1 and not single.search.parameters
    assert (single.training.learning_rate, single.lora.r) == (1e-3, 4)
    # What MLflow stores (sweep.yaml, best_config.yaml) reads back as the same spec.
    stored = revalidate_spec(parse_yaml(spec_to_yaml(spec), "sweep.yaml"), "the stored sweep.yaml")
    assert stored.search.num_trials == num_trials and stored.budget == spec.budget
    assert revalidate_spec(parse_yaml(spec_to_yaml(single), "best_config.yaml"), "best_config.yaml") == single


@pytest.mark.parametrize("num_trials, budget", SHAPES)
def test_a_warm_start_reads_an_earlier_sweep_of_every_shape(tmp_path, num_trials, budget):
    spec = user_spec(num_trials, budget)
    (tmp_path / "sweep.yaml").write_text(spec_to_yaml(spec))
    assert _earlier_trial_config(tmp_path) == spec.trial_config()


def test_a_spec_that_cannot_be_rebuilt_is_a_keyed_line_naming_what_was_built():
    spec = user_spec(10, None)
    with pytest.raises(UserError) as caught:
        with_overrides(spec, {"training.eval_every": 0}, built="the calibration run built from the sweep's YAML")
    (line,) = caught.value.lines
    assert line.startswith("training.eval_every: ")
    assert line.endswith("(in the calibration run built from the sweep's YAML)")


def test_a_notify_section_builds_every_spec_and_is_stored_masked():
    hooks = [{"url": "https://hooks.example.com/services/T0/B0/secret"}, {"url_env": "HOOK", "events": ["finished"]}]
    spec = validate_spec(small_sweep("shape", notify={"webhooks": hooks}), base_dir=REPO)
    assert calibration_spec(spec, steps=5, accumulation=1).notify == spec.notify
    single = single_run_spec(spec, {"training.learning_rate": 1e-3}, name="shape-trial-1")
    assert single.notify.webhooks[0].url.get_secret_value() == hooks[0]["url"]
    stored = revalidate_spec(parse_yaml(spec_to_yaml(spec), "sweep.yaml"), "the stored sweep.yaml")
    assert stored.notify.webhooks[0].url.get_secret_value() == "**********"
    assert stored.notify.webhooks[1] == spec.notify.webhooks[1]
