from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.errors import UserError
from sweeper.spec import load_spec, validate_spec, with_overrides
from tests.conftest import REPO, small_sweep, write_yaml

SHIPPED = sorted((REPO / "search_spaces").glob("*.yaml"))


def errors_of(raw: dict) -> list[str]:
    with pytest.raises(UserError) as caught:
        validate_spec(raw, base_dir=REPO)
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


def test_readme_reference_matches_the_schema():
    from sweeper.reference import markdown_reference

    assert markdown_reference() in (REPO / "README.md").read_text(), "run: python scripts/update_readme.py"
