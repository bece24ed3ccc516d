from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.errors import UserError
from sweeper.plan._checks import check_spec, load_checked_spec
from sweeper.spec._load import load_spec, validate_spec
from sweeper.spec._overrides import with_overrides
from tests.conftest import REPO, small_sweep, write_yaml

SHIPPED = sorted((REPO / "search_spaces").glob("*.yaml"))


def errors_of(raw: dict) -> list[str]:
    """The keyed lines of the whole validation pass: the schema, then the checks that read the disk."""
    with pytest.raises(UserError) as caught:
        check_spec(validate_spec(raw, base_dir=REPO))
    return caught.value.lines


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_sweep_validates(path):
    spec = load_spec(path)
    assert spec.search.parameters
    assert path.read_text().startswith(f"# Run: sweep start search_spaces/{path.name}")


def test_small_sweep_is_valid():
    spec = validate_spec(small_sweep("ok"), base_dir=REPO)
    assert spec.sweep_dir == (Path("sweeps") / "ok").resolve()
    assert spec.lora.effective_alpha == 16


def test_unknown_key_suggests_the_nearest():
    raw = small_sweep("x")
    raw["trainig"] = {}
    raw["lora"] = {"rank": 8}
    lines = errors_of(raw)
    assert any(line.startswith("trainig: unknown key; did you mean 'training'?") for line in lines)
    assert any(line.startswith("lora.rank: unknown key; did you mean 'r'?") for line in lines)


def test_wrong_type_names_key_and_value():
    lines = errors_of(small_sweep("x", training={"max_steps": "many"}))
    assert any(line.startswith("training.max_steps:") and "'many'" in line for line in lines)


def test_min_greater_than_max():
    raw = small_sweep("x")
    raw["search"]["parameters"] = {"training.learning_rate": {"distribution": "log_uniform", "low": 0.1, "high": 0.01}}
    lines = errors_of(raw)
    assert "search.parameters.training.learning_rate.low: must be < high, got low=0.1, high=0.01" in lines


def test_path_that_does_not_exist():
    raw = small_sweep("x")
    raw["search"]["parameters"] = {"training.learnin_rate": {"distribution": "uniform", "low": 0.1, "high": 0.2}}
    (line,) = errors_of(raw)
    assert line == "search.parameters.training.learnin_rate: no such config field; did you mean 'training.learning_rate'?"


def test_sampled_values_must_be_valid_for_the_field():
    raw = small_sweep("x")
    raw["search"]["parameters"] = {
        "lora.dropout": {"distribution": "uniform", "low": 0.0, "high": 1.5},
        "lora.r": {"distribution": "uniform", "low": 4, "high": 16},
    }
    lines = errors_of(raw)
    assert any(line.startswith("search.parameters.lora.dropout: value 1.5 is invalid") for line in lines)
    assert any(line.startswith("search.parameters.lora.r: lora.r is an integer") for line in lines)


def test_missing_data_file():
    lines = errors_of(small_sweep("x", data={"train": "nope/train.jsonl"}))
    assert any(line.startswith("data.train: file") and "does not exist" in line for line in lines)


def test_every_error_is_reported_at_once():
    raw = small_sweep("x", training={"max_steps": 0, "learning_rate": -1}, resources={"workers_per_trial": 0})
    lines = errors_of(raw)
    keys = {line.split(":")[0] for line in lines}
    assert {"training.max_steps", "training.learning_rate", "resources.workers_per_trial"} <= keys


def test_grid_needs_categorical_values():
    raw = small_sweep("x", search={"method": "grid", "num_trials": 2})
    assert any(line.startswith("search.method: grid needs categorical") for line in errors_of(raw))
    raw["search"]["parameters"] = {"lora.r": {"distribution": "categorical", "values": [4, 8]}}
    raw["search"]["num_trials"] = 3
    assert errors_of(raw) == ["search.num_trials: grid has 2 points, got num_trials=3"]


def test_grace_period_within_budget():
    raw = small_sweep("x", early_stopping={"grace_period": 30})
    assert any(line.startswith("early_stopping.grace_period: must be") for line in errors_of(raw))


def test_the_first_rung_by_default_is_placed_relative_to_max_steps_on_an_evaluation():
    def first_rung(training: dict, until_a_cap: bool = False, **early_stopping):
        raw = small_sweep("x", training=training, early_stopping=early_stopping)
        raw["early_stopping"].pop("grace_period")
        if until_a_cap:
            raw["search"].pop("num_trials")
            raw["budget"] = {"max_steps": 5000}
        spec = validate_spec(raw, base_dir=REPO)
        return spec.grace_period()

    # max_steps / 27, rounded up to an evaluation: the search-quality task's 9.
    assert first_rung({"max_steps": 243, "eval_every": 9}) == 9
    # The quickstart's 10 (90 / 27 = 3.3, first evaluation at 10).
    assert first_rung({"max_steps": 90, "eval_every": 10}) == 10
    # A real-size run: the first rung at step 100 of 2000, not at step 10 (which an eval_every
    # of 100 made invalid before: the fixed default 10 was below it).
    assert first_rung({"max_steps": 2000, "eval_every": 100}) == 100
    assert first_rung({"max_steps": 2000, "eval_every": 20}) == 80
    # A sweep that draws trials until a budget cap ranks them later: max_steps / 9 on an
    # evaluation (step 27 of 243), where the quickstart's first evaluation already is.
    assert first_rung({"max_steps": 243, "eval_every": 9}, until_a_cap=True) == 27
    assert first_rung({"max_steps": 90, "eval_every": 10}, until_a_cap=True) == 10
    assert first_rung({"max_steps": 2000, "eval_every": 20}, until_a_cap=True) == 240
    # Neither the share kept nor the rungs' spacing moves it.
    assert first_rung({"max_steps": 243, "eval_every": 9}, reduction_factor=2) == 9
    assert first_rung({"max_steps": 243, "eval_every": 9}, reduction_factor=2, rung_spacing=4, rungs="all") == 9
    # A default with no evaluation before the end is refused under the key that can change it.
    raw = small_sweep("x", training={"max_steps": 10, "eval_every": 10})
    raw["early_stopping"].pop("grace_period")
    assert errors_of(raw) == [
        "early_stopping.scheduler: asha ranks trials at an evaluation before training.max_steps (10), and "
        "training.eval_every is 10; lower eval_every, raise max_steps, or set early_stopping.scheduler: none"
    ]


def test_a_sweep_keeps_the_first_rung_it_started_with_when_a_later_default_differs(tmp_path):
    """`sweep resume` reads the sweep.yaml `sweep start` wrote: the first rung is written
    there as the sweep ran it, so a later version's default cannot move a resumed sweep's
    rungs (a sweep-until-a-cap's first rung default moved from step 9 of 243 to 27 once)."""
    from sweeper.run._sweep_dir import prepare_sweep_dir

    raw = small_sweep("kept", training={"max_steps": 243, "eval_every": 9}, output_dir=str(tmp_path))
    raw["early_stopping"].pop("grace_period")
    raw["search"].pop("num_trials")
    raw["budget"] = {"max_steps": 5000}
    spec = validate_spec(raw, base_dir=REPO)
    sweep_dir = prepare_sweep_dir(spec, overwrite=False)
    written = load_spec(sweep_dir / "sweep.yaml")
    assert written.early_stopping.grace_period == 27 == spec.grace_period()
    assert written.output_dir == sweep_dir
    # Its YAML otherwise as the user's: the saved spec validates to the same sweep.
    assert written.model_copy(update={"early_stopping": spec.early_stopping, "output_dir": spec.output_dir}) == spec



@pytest.mark.parametrize(
    "key, value, too_low, fix",
    [("rung_spacing", 4, 1.5, "remove it, or set reduction_factor instead"), ("rungs", 1, 0, "remove it")],
)
def test_rung_placement_only_where_the_sweeper_places_the_rungs(key, value, too_low, fix):
    # Ray's ASHA (asha_stopping, and asha over one fixed config) spaces its rungs by reduction_factor.
    raw = small_sweep("x", early_stopping={"scheduler": "asha_stopping", key: value})
    assert errors_of(raw) == [
        f"early_stopping.{key}: applies only to scheduler asha over search.parameters (Ray's ASHA, which "
        "also runs a sweep of one config, spaces its rungs by reduction_factor), got scheduler 'asha_stopping'; "
        + fix
    ]
    raw = small_sweep("x", search={"num_trials": 1, "parameters": {}}, early_stopping={key: value})
    assert [line.split(":")[0] for line in errors_of(raw)] == [f"early_stopping.{key}"]
    assert "and no search.parameters" in errors_of(raw)[0]
    raw = small_sweep("x", early_stopping={key: too_low})
    assert [line.split(":")[0] for line in errors_of(raw)] == [f"early_stopping.{key}"]


def test_rung_spacing_and_count_resolve():
    spec = validate_spec(small_sweep("x", early_stopping={"reduction_factor": 2, "rung_spacing": 4}), base_dir=REPO)
    assert (spec.early_stopping.reduction_factor, spec.early_stopping.rung_spacing_for()) == (2, 4)
    assert validate_spec(small_sweep("x"), base_dir=REPO).early_stopping.rung_spacing_for() == 3

    def stopping(**early_stopping):
        raw = small_sweep("x")
        raw["early_stopping"] = early_stopping
        return validate_spec(raw, base_dir=REPO).early_stopping

    # The defaults: under the sweeper's ASHA one rung keeping a quarter, no startup trials;
    # Ray's ASHA keeps a third at every rung.
    default = stopping()
    assert (default.reduction_factor_for(), default.rung_count(), default.startup_trials_for()) == (4, 1, 0)
    assert default.rung_spacing_for() == 4
    rays = stopping(scheduler="asha_stopping")
    assert (rays.reduction_factor_for(), rays.rung_count()) == (3, None)
    assert stopping(rungs="all").rung_count() is None and stopping(rungs=2).rung_count() == 2


@pytest.mark.parametrize("value", [0, -1, "three", True, 2.5])
def test_a_rung_count_is_a_whole_number_or_all(value):
    raw = small_sweep("x", early_stopping={"rungs": value})
    assert errors_of(raw) == [f"early_stopping.rungs: must be a whole number >= 1, or all (got {value!r})"]


def test_startup_trials_only_under_asha_and_fewer_than_the_trials():
    raw = small_sweep("x", early_stopping={"scheduler": "median", "startup_trials": 2})
    assert errors_of(raw) == [
        "early_stopping.startup_trials: applies only to scheduler asha, got scheduler 'median'; remove it or set "
        "early_stopping.scheduler: asha"
    ]
    raw = small_sweep("x", early_stopping={"scheduler": "none", "startup_trials": 1})
    assert [line.split(":")[0] for line in errors_of(raw)] == ["early_stopping.startup_trials"]
    raw = small_sweep("x", search={"num_trials": 3}, early_stopping={"startup_trials": 3})
    assert [line.split(":")[0] for line in errors_of(raw)] == ["early_stopping.startup_trials"]
    assert "must be < search.num_trials (3), got 3" in errors_of(raw)[0]
    spec = validate_spec(small_sweep("x", search={"num_trials": 3}, early_stopping={"startup_trials": 2}), base_dir=REPO)
    assert spec.early_stopping.startup_trials == 2


def test_metric_must_be_reported_by_the_task():
    raw = small_sweep("x", search={"metric": "accuracy"})
    assert any(line.startswith("search.metric: 'accuracy' is not reported") for line in errors_of(raw))


def test_gpus_need_use_gpu():
    raw = small_sweep("x", resources={"gpus_per_worker": 1})
    assert any(line.startswith("resources.gpus_per_worker: is 1.0 but use_gpu is false") for line in errors_of(raw))
    spec = validate_spec(small_sweep("x", resources={"use_gpu": True}), base_dir=REPO)
    assert spec.resources.gpus_per_worker == 1


def test_alpha_per_rank_ties_alpha_to_sampled_rank():
    spec = validate_spec(small_sweep("x", lora={"alpha_per_rank": 2}), base_dir=REPO)
    trial = with_overrides(spec, {"lora.r": 32})
    assert trial.lora.effective_alpha == 64


def test_overrides_are_validated():
    spec = validate_spec(small_sweep("x"), base_dir=REPO)
    assert with_overrides(spec, {"training.learning_rate": 0.01}).training.learning_rate == 0.01
    with pytest.raises(Exception):
        with_overrides(spec, {"training.learning_rate": -1})


def test_relative_paths_are_relative_to_the_yaml(tmp_path):
    (tmp_path / "d").mkdir()
    for split in ("train", "eval"):
        (tmp_path / "d" / f"{split}.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    raw = small_sweep("x", data={"train": "d/train.jsonl", "eval": "d/eval.jsonl"})
    spec = load_spec(write_yaml(tmp_path / "s.yaml", raw))
    assert spec.data.train == tmp_path / "d" / "train.jsonl"


runner = CliRunner()


def test_cli_validate_ok():
    result = runner.invoke(app, ["validate", str(REPO / "search_spaces" / "quickstart.yaml")])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output


def test_cli_validate_reports_keyed_lines_and_exit_2(tmp_path):
    raw = small_sweep("x", training={"max_steps": "many"})
    raw["serach"] = {}
    result = runner.invoke(app, ["validate", str(write_yaml(tmp_path / "bad.yaml", raw))])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert any("serach: unknown key; did you mean 'search'?" in line for line in lines)
    assert any("training.max_steps:" in line for line in lines)
    assert "Traceback" not in result.output


def test_cli_validate_invalid_yaml_syntax(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntraining:\n  max_steps: [1, 2\n")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "invalid YAML at line" in result.output and "column" in result.output


def test_cli_validate_missing_file(tmp_path):
    result = runner.invoke(app, ["validate", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_yaml_reference_is_generated_into_the_docs_not_copied():
    # docs/hooks.py writes `markdown_reference()` into the page when the site is built
    # (tests/unit/test_docs.py builds it); a copy in the README could drift.
    assert "<!-- generated: yaml-reference -->" in (REPO / "docs" / "reference" / "yaml.md").read_text()
    assert "| `training.learning_rate` |" not in (REPO / "README.md").read_text()


# ---------------------------------------------------------------- input that used to escape


def model_folder(
    tmp_path, config: str | None = '{"model_type": "llama"}', weights: bool = True, tokenizer: bool = True
) -> Path:
    folder = tmp_path / "my-model"
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(config)
    if weights:
        (folder / "model.safetensors").write_bytes(b"")
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    return folder


def test_model_folder_without_config_json_is_refused_at_validate(tmp_path):
    folder = model_folder(tmp_path, config=None)
    lines = errors_of(small_sweep("x", model={"name_or_path": str(folder)}))
    assert any(line.startswith(f"model.name_or_path: model directory {folder}: no config.json;") for line in lines)


@pytest.mark.parametrize("config, problem", [
    ('{"model_type": "llama",', "config.json is not valid JSON (line 1"),
    ("[1, 2]", "config.json is not a JSON object"),
    ('{"hidden_size": 8}', "config.json has no 'model_type'"),
])
def test_model_folder_with_broken_config_json_is_refused(tmp_path, config, problem):
    folder = model_folder(tmp_path, config=config)
    lines = errors_of(small_sweep("x", model={"name_or_path": str(folder)}))
    assert any(line.startswith(f"model.name_or_path: model directory {folder}: {problem}") for line in lines), lines


def test_model_folder_without_weights_is_refused(tmp_path):
    folder = model_folder(tmp_path, weights=False)
    lines = errors_of(small_sweep("x", model={"name_or_path": str(folder)}))
    assert any(line.startswith(f"model.name_or_path: model directory {folder} has no weights") for line in lines)


def test_model_folder_without_tokenizer_is_refused(tmp_path):
    folder = model_folder(tmp_path, tokenizer=False)
    lines = errors_of(small_sweep("x", model={"name_or_path": str(folder)}))
    assert any(line.startswith(f"model.name_or_path: model directory {folder} has no tokenizer") for line in lines)


def test_model_folder_that_loads_is_accepted(tmp_path):
    folder = model_folder(tmp_path)
    spec = validate_spec(small_sweep("x", model={"name_or_path": str(folder)}), base_dir=REPO)
    assert spec.model.name_or_path == str(folder)


def test_adapter_folder_with_a_missing_local_base_is_refused(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(f'{{"base_model_name_or_path": "{tmp_path / "gone"}"}}')
    lines = errors_of(small_sweep("x", model={"name_or_path": str(adapter)}))
    assert any(line.startswith(f"model.name_or_path: the base model of adapter {adapter}: model directory")
               for line in lines), lines


def test_unknown_builtin_model_lists_the_valid_ones():
    lines = errors_of(small_sweep("x", model={"name_or_path": "builtin:tiny-gpt"}))
    assert any(line.startswith("model.name_or_path: no built-in model 'builtin:tiny-gpt'; valid: builtin:tiny-llama")
               for line in lines), lines


def test_output_dir_under_a_file_is_refused(tmp_path):
    (tmp_path / "a-file").write_text("x")
    lines = errors_of(small_sweep("x", output_dir=str(tmp_path / "a-file" / "sweeps")))
    assert any(line.startswith(f"output_dir: cannot create {tmp_path / 'a-file' / 'sweeps'}: {tmp_path / 'a-file'} is a file")
               for line in lines), lines


def test_output_dir_in_a_read_only_folder_is_refused(tmp_path, monkeypatch):
    import os

    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    real_access = os.access
    # Root may write anywhere: answer as the file system answers an ordinary user.
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != read_only and real_access(path, mode))
    lines = errors_of(small_sweep("x", output_dir=str(read_only / "sweeps" / "x")))
    assert any(line.startswith(f"output_dir: cannot create {read_only / 'sweeps' / 'x'}: {read_only} is read-only")
               for line in lines), lines


def test_yaml_with_a_key_given_twice_is_refused(tmp_path):
    text = (REPO / "search_spaces" / "quickstart.yaml").read_text()
    bad = tmp_path / "twice.yaml"
    bad.write_text(text.replace("training:\n", "training:\n  learning_rate: 0.1\n  learning_rate: 0.2\n", 1)
                   + "name: again\n")
    with pytest.raises(UserError) as caught:
        load_spec(bad)
    first_name = 1 + next(i for i, line in enumerate(bad.read_text().splitlines()) if line.startswith("name:"))
    last_line = len(bad.read_text().splitlines())
    lr_line = 1 + next(i for i, line in enumerate(bad.read_text().splitlines()) if "learning_rate: 0.1" in line)
    assert sorted(caught.value.lines) == [
        f"name: given twice in twice.yaml, at line {first_name} and line {last_line}; keep one",
        f"training.learning_rate: given twice in twice.yaml, at line {lr_line} and line {lr_line + 1}; keep one",
    ]


def test_data_path_that_is_a_folder_is_refused(tmp_path):
    lines = errors_of(small_sweep("x", data={"train": str(tmp_path)}))
    expected = f"data.train: {tmp_path} is a folder but not a dataset written by datasets' save_to_disk"
    assert any(line.startswith(expected) for line in lines), lines


@pytest.mark.parametrize("path, why", [
    ("training.max_steps", "every trial trains the same step budget"),
    ("training.eval_every", "every trial reports at the same steps"),
])
def test_fields_a_trial_cannot_apply_are_refused_as_search_parameters(path, why):
    parameters = {path: {"distribution": "int_uniform", "low": 10, "high": 20}}
    lines = errors_of(small_sweep("x", search={"parameters": parameters}))
    assert any(line.startswith(f"search.parameters.{path}: cannot be searched: {why}") for line in lines), lines


def test_dpo_max_prompt_length_is_refused_as_a_search_parameter():
    from tests.conftest import PREFERENCE_EVAL, PREFERENCE_TRAIN

    raw = small_sweep(
        "x", task="dpo", data={"train": str(PREFERENCE_TRAIN), "eval": str(PREFERENCE_EVAL)},
        search={"parameters": {"dpo.max_prompt_length": {"distribution": "categorical", "values": [32, 64]}}},
    )
    lines = errors_of(raw)
    assert any(line.startswith("search.parameters.dpo.max_prompt_length: cannot be searched: the data is tokenized once")
               for line in lines), lines


def test_fields_a_trial_applies_stay_searchable():
    parameters = {
        "training.per_device_batch_size": {"distribution": "categorical", "values": [4, 8]},
        "training.gradient_accumulation_steps": {"distribution": "int_uniform", "low": 1, "high": 4},
        "training.precision": {"distribution": "categorical", "values": ["fp32", "bf16"]},
        "training.seed": {"distribution": "int_uniform", "low": 0, "high": 9},
    }
    spec = validate_spec(small_sweep("x", search={"parameters": parameters}), base_dir=REPO)
    assert set(spec.search.parameters) == set(parameters)


def test_cross_field_problems_are_each_their_own_keyed_line():
    raw = small_sweep("x", search={"metric": "accuracy"}, early_stopping={"grace_period": 99},
                      cost={"accelerator": "tpu"})
    lines = errors_of(raw)
    assert [line.split(":")[0] for line in lines] == ["search.metric", "early_stopping.grace_period", "cost.accelerator"]


def test_cli_start_refuses_bad_input_before_anything_starts(tmp_path):
    folder = model_folder(tmp_path, config=None)
    raw = small_sweep("x", model={"name_or_path": str(folder)}, output_dir=str(tmp_path / "sweeps" / "x"))
    result = runner.invoke(app, ["start", str(write_yaml(tmp_path / "s.yaml", raw))])
    assert result.exit_code == 2, result.output
    assert "error: model.name_or_path: model directory" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "sweeps").exists()


def test_model_folder_beside_the_yaml_is_local_not_a_hub_id(tmp_path):
    (tmp_path / "models").mkdir()
    folder = tmp_path / "models" / "mine"
    folder.mkdir()
    raw = small_sweep("x", model={"name_or_path": "models/mine"})
    lines = errors_of_file(tmp_path, raw)
    assert any(line.startswith(f"model.name_or_path: model directory {folder}: no config.json") for line in lines)


def test_a_gguf_file_beside_the_yaml_is_a_local_model(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.gguf").write_bytes(b"GGUF" + bytes(60))  # only the first bytes are read here
    spec = load_spec(write_yaml(tmp_path / "s.yaml", small_sweep("x", model={"name_or_path": "models/mine.gguf"})))
    assert spec.model.name_or_path == str(tmp_path / "models" / "mine.gguf")


@pytest.mark.parametrize("content, problem", [
    (None, "GGUF file {file} does not exist;"),
    (b"PK\x03\x04", "{file} is not a GGUF file (it does not begin with the bytes GGUF);"),
])
def test_a_gguf_file_that_is_missing_or_not_gguf_is_refused(tmp_path, content, problem):
    file = tmp_path / "mine.gguf"
    if content is not None:
        file.write_bytes(content)
    lines = errors_of_file(tmp_path, small_sweep("x", model={"name_or_path": "mine.gguf"}))
    assert any(line.startswith(f"model.name_or_path: {problem.format(file=file)}") for line in lines), lines


def errors_of_file(folder: Path, raw: dict) -> list[str]:
    with pytest.raises(UserError) as caught:
        load_checked_spec(write_yaml(folder / "s.yaml", raw))
    return caught.value.lines


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "a-file").write_text("x")
    lines = errors_of(small_sweep("x", output_dir=str(tmp_path / "a-file")))
    assert any(line.startswith(f"output_dir: {tmp_path / 'a-file'} is a file, not a folder") for line in lines), lines
