"""Conditional parameters in search.parameters: a categorical's `conditional` values each
with their own parameters (trl.method over dpo and simpo: beta for DPO, beta and gamma
for SimPO), checked by the schema against the config with that value set, and drawn
define-by-run by the searcher so that a trial's config holds only its value's parameters."""

from __future__ import annotations

import pytest

from sweeper.errors import UserError
from sweeper.search._searcher import make_searcher
from sweeper.spec._load import validate_spec
from tests.conftest import small_dpo_sweep

DPO_BETA = {"distribution": "log_uniform", "low": 0.05, "high": 0.5}
SIMPO_BETA = {"distribution": "uniform", "low": 1.0, "high": 2.5}
SIMPO_GAMMA = {"distribution": "uniform", "low": 0.3, "high": 1.5}


def method_sweep(conditional: dict | None = None, values=("dpo", "simpo"), fixed="dpo", **parameters) -> dict:
    raw = small_dpo_sweep("methods", trainer="trl", trl={"method": fixed})
    raw["dpo"] = {"max_prompt_length": 64}
    method = {"distribution": "categorical", "values": list(values)}
    method["conditional"] = conditional if conditional is not None else {
        "dpo": {"trl.beta": DPO_BETA}, "simpo": {"trl.beta": SIMPO_BETA, "trl.simpo_gamma": SIMPO_GAMMA},
    }
    raw["search"]["method"] = "random"
    raw["search"]["parameters"] = {
        "training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-2},
        "trl.method": method, **parameters,
    }
    return raw


def problems(raw: dict, tmp_path) -> list[str]:
    with pytest.raises(UserError) as caught:
        validate_spec(raw, base_dir=tmp_path)
    return caught.value.lines


def test_each_trial_holds_only_its_methods_parameters_from_that_methods_range(tmp_path):
    spec = validate_spec(method_sweep(), base_dir=tmp_path)
    searcher = make_searcher(spec, tmp_path / "sweep")
    configs = [searcher.suggest(f"trial_{i}") for i in range(12)]
    by_method = {c["trl.method"]: c for c in configs}
    assert set(by_method) == {"dpo", "simpo"}
    for config in configs:
        if config["trl.method"] == "dpo":
            assert set(config) == {"training.learning_rate", "trl.method", "trl.beta"}
            assert 0.05 <= config["trl.beta"] <= 0.5
        else:
            assert set(config) == {"training.learning_rate", "trl.method", "trl.beta", "trl.simpo_gamma"}
            assert 1.0 <= config["trl.beta"] <= 2.5 and 0.3 <= config["trl.simpo_gamma"] <= 1.5
        # The trial applies it: its trainer config gets the method's own fields.
        trl = spec.trial_config().with_values(config).trl
        assert trl.method == config["trl.method"] and trl.config_kwargs()["beta"] == config["trl.beta"]
    # In the study each branch's beta has its own name, so TPE models them apart.
    names = {name for trial in searcher.study.get_trials() for name in trial.params}
    assert names == {"training.learning_rate", "trl.method", "trl.beta|trl.method=dpo",
                     "trl.beta|trl.method=simpo", "trl.simpo_gamma|trl.method=simpo"}
    # Asked again for a trial it suggested (after a restore): the same config.
    assert searcher.suggest("trial_3") == configs[3]


def test_tpe_draws_conditional_parameters_after_its_startup_trials(tmp_path):
    raw = method_sweep()
    raw["search"].update(method="tpe", num_trials=12)
    spec = validate_spec(raw, base_dir=tmp_path)
    searcher = make_searcher(spec, tmp_path / "sweep")
    for number in range(10):
        trial_id = f"trial_{number}"
        config = searcher.suggest(trial_id)
        assert ("trl.simpo_gamma" in config) == (config["trl.method"] == "simpo")
        searcher.on_trial_complete(trial_id, {"eval_rewards_accuracy": config["trl.beta"] / 3, "step": 30})


def test_a_spec_read_back_from_json_keeps_its_conditional_space(tmp_path):
    from sweeper.search._space import conditional_distributions
    from sweeper.spec._schema import SweepSpec

    spec = validate_spec(method_sweep(), base_dir=tmp_path)
    again = SweepSpec.model_validate(spec.model_dump(mode="json"), context={"check_files": False})
    assert conditional_distributions(again) == conditional_distributions(spec)


@pytest.mark.parametrize("conditional, parameters, expected", [
    ({"dpo": {"trl.simpo_gamma": SIMPO_GAMMA}}, {},
     "search.parameters.trl.method.conditional.dpo.trl.simpo_gamma: no such config field; not a field of DPOConfig "
     "(trl.method dpo); it belongs to trl.method cpo / simpo"),
    ({"simpo": {"trl.simpo_gama": SIMPO_GAMMA}}, {},
     "search.parameters.trl.method.conditional.simpo.trl.simpo_gama: no such config field; not a field of "
     "CPOConfig (trl.method simpo); did you mean 'simpo_gamma'?"),
    ({"kto": {"trl.beta": DPO_BETA}}, {},
     "search.parameters.trl.method.conditional.kto: not one of trl.method's values: dpo, simpo; use one of them"),
    ({"simpo": {"trl.loss_type": {"distribution": "categorical", "values": ["simpo", "bogus"]}}}, {},
     "search.parameters.trl.method.conditional.simpo.trl.loss_type: value 'bogus' is invalid for trl.loss_type: loss_type: "
     "'bogus' is not one of CPOConfig.loss_type's values"),
    ({"simpo": {"training.learning_rate": DPO_BETA}}, {},
     "search.parameters.trl.method.conditional.simpo.training.learning_rate: training.learning_rate is searched "
     "for every trial too"),
    ({"simpo": {"trl.loss_type": {"distribution": "categorical", "values": ["simpo"],
                                  "conditional": {"simpo": {"trl.beta": SIMPO_BETA}}}}}, {},
     "search.parameters.trl.method.conditional.simpo.trl.loss_type.conditional: conditional parameters are one "
     "level deep"),
    ({"dpo": {"trl.beta": DPO_BETA}}, {"trl.simpo_gamma": SIMPO_GAMMA, "fixed": "simpo"},
     "search.parameters.trl.simpo_gamma: searched for every trl.method, but not a field of DPOConfig (trl.method dpo)"),
])
def test_a_conditional_parameter_that_cannot_be_set_is_one_keyed_line(tmp_path, conditional, parameters, expected):
    lines = problems(method_sweep(conditional, **parameters), tmp_path)
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_grid_search_refuses_conditional_parameters(tmp_path):
    raw = method_sweep({"dpo": {"trl.loss_type": {"distribution": "categorical", "values": ["sigmoid", "ipo"]}}})
    raw["search"]["method"] = "grid"
    del raw["search"]["parameters"]["training.learning_rate"]
    raw["search"]["num_trials"] = 2
    assert problems(raw, tmp_path) == [
        "search.method: grid draws every trial from one fixed grid; the conditional parameters of "
        "search.parameters.trl.method need search.method tpe or random"
    ]


def test_the_best_trials_config_is_one_run_of_its_method_with_its_parameters(tmp_path):
    from sweeper.spec._overrides import single_run_spec

    spec = validate_spec(method_sweep(), base_dir=tmp_path)
    # As MLflow keeps a trial's values (sweep export): text, typed by the config dataclass's fields.
    best = single_run_spec(spec, {"trl.method": "simpo", "trl.beta": "2.0", "trl.simpo_gamma": "0.5",
                                  "training.learning_rate": "0.001"}, name="methods-best")
    assert best.search.parameters == {} and best.trl.method == "simpo"
    assert best.trl.config_kwargs() == {"loss_type": "simpo", "cpo_alpha": 0.0, "beta": 2.0, "simpo_gamma": 0.5}
