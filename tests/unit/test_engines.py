"""The trial engines' schema without Ray: `trainer`, the trl section checked against
trl's config dataclasses (unknown field with the nearest name, a method's field given to
another, knobs the sweep's own sections set), the function section's entry point, and
what an engine refuses before launch. Each problem is one keyed line."""

from __future__ import annotations

import textwrap

import pytest

from sweeper.errors import UserError
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_dpo_sweep, small_sweep
from trainables.engines import field_choices, trl_config_fields


def problems(raw: dict, tmp_path) -> list[str]:
    with pytest.raises(UserError) as caught:
        validate_spec(raw, base_dir=tmp_path)
    return caught.value.lines


def trl_dpo(**trl) -> dict:
    raw = small_dpo_sweep("d", trainer="trl", trl={"method": "dpo", **trl})
    raw["dpo"] = {"max_prompt_length": 64}
    raw["search"]["parameters"] = {"training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-2}}
    return raw


def test_the_builtin_loop_is_the_default_and_trl_fields_reach_the_trial(tmp_path):
    assert validate_spec(small_sweep("s"), base_dir=tmp_path).trainer == "builtin"
    raw = trl_dpo(loss_type="ipo")
    raw["search"]["parameters"] = {
        "trl.beta": {"distribution": "log_uniform", "low": 0.05, "high": 0.5},
        "trl.loss_type": {"distribution": "categorical", "values": ["sigmoid", "ipo", "hinge"]},
    }
    spec = validate_spec(raw, base_dir=tmp_path)
    trial = spec.trial_config().with_values({"trl.beta": 0.3, "trl.loss_type": "hinge"})
    assert trial.trainer == "trl" and trial.trl.method == "dpo"
    assert trial.trl.config_kwargs() == {"loss_type": ["hinge"], "beta": 0.3}


def test_simpo_is_cpo_with_its_loss_and_gamma_is_searchable(tmp_path):
    raw = trl_dpo()
    raw["trl"] = {"method": "simpo"}
    raw["search"]["parameters"] = {
        "trl.beta": {"distribution": "uniform", "low": 1.0, "high": 2.5},
        "trl.simpo_gamma": {"distribution": "uniform", "low": 0.3, "high": 1.5},
    }
    trial = validate_spec(raw, base_dir=tmp_path).trial_config().with_values({"trl.beta": 2.0, "trl.simpo_gamma": 0.5})
    assert trial.trl.config_kwargs() == {"loss_type": "simpo", "cpo_alpha": 0.0, "beta": 2.0, "simpo_gamma": 0.5}


def test_an_unknown_trl_field_gets_the_nearest_name_from_the_config_dataclass(tmp_path):
    raw = small_sweep("s", trainer="trl", trl={"method": "sft", "pakcing": True})
    assert problems(raw, tmp_path) == ["trl.pakcing: not a field of SFTConfig (trl.method sft); did you mean 'packing'?"]


def test_an_unknown_searched_trl_field_is_keyed_under_search_parameters(tmp_path):
    raw = trl_dpo()
    raw["search"]["parameters"]["trl.betta"] = {"distribution": "uniform", "low": 0.1, "high": 0.5}
    [line] = problems(raw, tmp_path)
    assert line.startswith("search.parameters.trl.betta: no such config field; not a field of DPOConfig")
    assert "'beta'" in line


def test_a_field_of_another_method_names_the_methods_that_have_it(tmp_path):
    raw = small_sweep("s", trainer="trl", trl={"method": "sft", "beta": 0.1})
    [line] = problems(raw, tmp_path)
    assert line.startswith("trl.beta: not a field of SFTConfig (trl.method sft); it belongs to trl.method dpo")
    raw = trl_dpo(simpo_gamma=0.5)
    [line] = problems(raw, tmp_path)
    assert line.startswith("trl.simpo_gamma: not a field of DPOConfig") and "cpo / simpo" in line


def test_a_searched_method_must_have_every_field_given(tmp_path):
    raw = trl_dpo(loss_type="sigmoid")
    raw["search"]["parameters"]["trl.method"] = {"distribution": "categorical", "values": ["dpo", "kto"]}
    [line] = problems(raw, tmp_path)
    assert line.startswith("search.parameters.trl.method: value 'kto' is invalid for trl.method")
    assert "'sigmoid' is not one of KTOConfig.loss_type's values: kto, apo_zero_unpaired" in line


def test_trl_values_are_checked_against_the_dataclass_types_and_choices(tmp_path):
    assert "ipo" in field_choices(trl_config_fields("dpo")["loss_type"])  # from DPOConfig's own help
    assert problems(trl_dpo(loss_type="bogus"), tmp_path)[0].startswith(
        "trl.loss_type: 'bogus' is not one of DPOConfig.loss_type's values: sigmoid, hinge, ipo"
    )
    assert problems(trl_dpo(beta="high"), tmp_path)[0].startswith("trl.beta: DPOConfig.beta is float, got 'high'")


@pytest.mark.parametrize("field, owner", [
    ("learning_rate", "training.learning_rate"), ("max_length", "data.max_length"), ("seed", "training.seed"),
])
def test_a_knob_of_the_sweeps_own_sections_is_set_there(tmp_path, field, owner):
    raw = small_sweep("s", trainer="trl", trl={"method": "sft", field: 1})
    assert problems(raw, tmp_path) == [f"trl.{field}: set by {owner} (one key for each knob); set it there"]


def test_fields_the_engine_sets_are_refused_with_why(tmp_path):
    raw = small_sweep("s", trainer="trl", trl={"method": "sft", "save_steps": 3})
    assert problems(raw, tmp_path) == ["trl.save_steps: set by the sweep: a checkpoint is kept at every evaluation; remove it"]


def test_the_method_must_match_the_task(tmp_path):
    raw = small_sweep("s", trainer="trl", trl={"method": "dpo"})
    assert problems(raw, tmp_path) == [
        "task: trl.method dpo trains on preference pairs (task dpo), got task 'sft'; set task: dpo"
    ]


def test_sections_of_an_engine_not_chosen_are_refused(tmp_path):
    raw = small_sweep("s", trl={"method": "sft"})
    assert problems(raw, tmp_path) == ["trl: only trainer trl reads trl.*, got trainer 'builtin'; set trainer: trl or remove it"]
    raw = small_dpo_sweep("d", trainer="trl", trl={"method": "dpo"})
    raw["dpo"] = {"max_prompt_length": 64}
    assert any(line.startswith("search.parameters.dpo.beta: trainer trl does not read dpo.*; search trl.beta")
               for line in problems(raw, tmp_path))


@pytest.mark.parametrize("sections, key", [
    ({"resources": {"strategy": "fsdp"}}, "resources.strategy"),
    ({"chaos": {"fault": "oom"}}, "chaos.fault"),
])
def test_what_only_the_builtin_loop_does_is_refused_before_launch(tmp_path, sections, key):
    raw = small_sweep("s", trainer="trl", trl={"method": "sft"}, **sections)
    lines = problems(raw, tmp_path)
    assert any(line.startswith(f"{key}: ") and "built-in loop" in line for line in lines), lines


def write_function(tmp_path, body: str) -> str:
    (tmp_path / "mine.py").write_text(textwrap.dedent(body))
    return "mine.py:train"


def test_a_function_entry_point_relative_to_the_yaml_file_is_imported_and_checked(tmp_path):
    entry = write_function(tmp_path, "def train(config, reporter):\n    pass\n")
    raw = small_sweep("f", trainer="function", function={"entry_point": entry, "hidden": 8})
    raw["search"]["parameters"] = {"function.hidden": {"distribution": "categorical", "values": [8, 16]}}
    spec = validate_spec(raw, base_dir=tmp_path)
    assert spec.function.entry_point == f"{tmp_path / 'mine.py'}:train"
    trial = spec.trial_config().with_values({"function.hidden": 16})
    assert trial.function.model_dump()["hidden"] == 16


@pytest.mark.parametrize("body, entry, expected", [
    (None, "missing.py:train", "function.entry_point: file {tmp}/missing.py does not exist"),
    ("import not_a_module_anywhere\n", "mine.py:train", "function.entry_point: cannot import {tmp}/mine.py: "
     "ModuleNotFoundError: No module named 'not_a_module_anywhere'"),
    ("def other(config, reporter):\n    pass\n", "mine.py:train", "function.entry_point: {tmp}/mine.py has no 'train'"),
    ("def train(config):\n    pass\n", "mine.py:train", "function.entry_point: {tmp}/mine.py:train must take "
     "(config, reporter), got (config)"),
    (None, "no_colon", "function.entry_point: expected 'path/to/file.py:fn' or 'package.module:fn'"),
])
def test_an_entry_point_that_cannot_be_called_is_one_keyed_line(tmp_path, body, entry, expected):
    if body is not None:
        write_function(tmp_path, body)
    raw = small_sweep("f", trainer="function", function={"entry_point": entry})
    [line] = problems(raw, tmp_path)
    assert line.startswith(expected.format(tmp=tmp_path)), line


def test_the_shipped_engine_examples_validate():
    from sweeper.spec._load import load_spec

    for name in ("function-torch.yaml", "function-hf.yaml"):
        spec = load_spec(REPO / "examples" / "engines" / name)
        assert spec.trainer == "function", name


def test_the_calibration_is_refused_for_a_function_and_times_every_trl_method(tmp_path):
    from sweeper.plan._calibrate import costliest_overrides

    entry = write_function(tmp_path, "def train(config, reporter):\n    pass\n")
    raw = small_sweep("f", trainer="function", function={"entry_point": entry}, cost={"calibrate": True})
    [line] = problems(raw, tmp_path)
    assert line.startswith("cost.calibrate: the calibration times a trial's first steps") and "cost.calibrate: false" in line
    # trl's ORPO and CPO count no tokens; the calibration reads the train_seconds every trl trial reports.
    raw = trl_dpo()
    raw["trl"] = {"method": "simpo"}
    raw["cost"] = {"calibrate": True}
    raw["search"]["parameters"]["trl.method"] = {"distribution": "categorical", "values": ["simpo", "orpo", "dpo"]}
    spec = validate_spec(raw, base_dir=tmp_path)
    # The costliest config of a search over methods runs one with a reference model.
    assert costliest_overrides(spec) == {"trl.method": "dpo"}


def test_the_reporter_reports_each_step_once_with_its_checkpoint_and_knows_the_budget(tmp_path):
    from trainables.function_engine import TrialReporter

    spec = validate_spec(small_sweep("s", training={"max_steps": 20, "eval_every": 10}), base_dir=tmp_path)
    reports = []
    reporter = TrialReporter(lambda metrics, folder: reports.append((metrics, folder)), spec.trial_config(), {}, None, 0.0)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    reporter.report({"eval_loss": 2.5}, 10, str(checkpoint))
    assert reports == [({"step": 10, "eval_loss": 2.5}, str(checkpoint))] and not reporter.should_stop()
    with pytest.raises(ValueError, match="step 10 comes after step 10"):
        reporter.report({"eval_loss": 2.4}, 10)
    with pytest.raises(ValueError, match="eval_loss must be a finite number"):
        reporter.report({"eval_loss": float("nan")}, 20)
    reporter.report({"eval_loss": 2.0}, 20)
    assert reporter.should_stop()
    # A trial that continues from that checkpoint goes on after its step.
    resumed = TrialReporter(lambda *_: None, spec.trial_config(), {}, str(checkpoint), 0.0)
    assert resumed.last_step == 10 and resumed.resume_from == str(checkpoint)


def test_a_metric_kto_does_not_report_is_refused(tmp_path):
    raw = trl_dpo()
    raw["trl"] = {"method": "kto"}
    raw["search"]["metric"], raw["search"]["goal"] = "eval_rewards_accuracy", "maximize"
    assert problems(raw, tmp_path) == [
        "search.metric: trl's KTOTrainer reports no eval_rewards_accuracy (its pairs are unpaired); "
        "use eval_loss, eval_rewards_margin or eval_rewards_chosen"
    ]


def _methods_searched(conditional: dict, **parameters) -> dict:
    raw = trl_dpo()
    raw["search"]["parameters"].update({"trl.method": {"distribution": "categorical", "values": ["dpo", "simpo"],
                                                       "conditional": conditional}, **parameters})
    return raw


GAMMA = {"distribution": "uniform", "low": 0.3, "high": 1.5}


@pytest.mark.parametrize("case, make, expected", [
    ("unknown trl field", lambda tmp: small_sweep("b", trainer="trl", trl={"method": "sft", "pakcing": True}),
     "trl.pakcing: not a field of SFTConfig (trl.method sft); did you mean 'packing'?"),
    ("another method's field", lambda tmp: small_sweep("b", trainer="trl", trl={"method": "sft", "beta": 0.1}),
     "trl.beta: not a field of SFTConfig (trl.method sft); it belongs to trl.method dpo"),
    ("another method's conditional field", lambda tmp: _methods_searched({"dpo": {"trl.simpo_gamma": GAMMA}}),
     "search.parameters.trl.method.conditional.dpo.trl.simpo_gamma: no such config field; not a field of DPOConfig"),
    ("a field searched for every method", lambda tmp: {**_methods_searched({}, **{"trl.simpo_gamma": GAMMA}),
                                                       "trl": {"method": "simpo"}},
     "search.parameters.trl.simpo_gamma: searched for every trl.method, but not a field of DPOConfig"),
    ("a searched method of another task", lambda tmp: {**trl_dpo(), "search": {**trl_dpo()["search"], "parameters": {
        "trl.method": {"distribution": "categorical", "values": ["dpo", "sft"]}}}},
     "search.parameters.trl.method: sft train(s) on chat or prompt/completion examples (task sft), not on task dpo's data"),
    ("entry point that does not import", lambda tmp: small_sweep(
        "b", trainer="function", function={"entry_point": write_function(tmp, "import not_a_module_anywhere\n")}),
     "function.entry_point: cannot import {tmp}/mine.py: ModuleNotFoundError"),
    ("entry point with the wrong signature", lambda tmp: small_sweep(
        "b", trainer="function", function={"entry_point": write_function(tmp, "def train(config):\n    pass\n")}),
     "function.entry_point: {tmp}/mine.py:train must take (config, reporter), got (config)"),
])
def test_bad_engine_input_at_start_is_one_keyed_line_exit_2_and_starts_nothing(tmp_path, case, make, expected):
    from typer.testing import CliRunner

    from sweeper.cli import app
    from tests.conftest import write_yaml

    raw = make(tmp_path)
    raw["output_dir"] = str(tmp_path / "sweeps" / "b")
    result = CliRunner().invoke(app, ["start", str(write_yaml(tmp_path / "b.yaml", raw))])
    assert result.exit_code == 2, (case, result.output)
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: " + expected.format(tmp=tmp_path)), (case, result.output)
    assert "Traceback" not in result.output and not (tmp_path / "sweeps").exists()
