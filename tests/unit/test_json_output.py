"""Machine-readable output (sweeper/output): `--json` on validate, plan, status and list,
and `--summary-json PATH` at the end of start and resume. Each document parses as one JSON
object on stdout, opens with schema_version and command, holds every field of its schema
page and what the text would say; a refusal under --json is the same keyed line on stderr,
the same exit status, and a JSON error document on stdout. No Ray: the plan is the
throughput model's, the store one the real tracker wrote."""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

import sweeper.run._launch as launch
from sweeper.cli import app
from sweeper.cli._common import finish_run
from sweeper.names import TrialState
from sweeper.output import SCHEMA_VERSION, markdown_schema
from sweeper.output._documents import (
    ErrorDocument, ListDocument, PlanDocument, StatusDocument, SummaryDocument, ValidateDocument,
)
from sweeper.track._book import SweepBook, TrialRecord
from tests.conftest import small_sweep, write_yaml
from tests.unit.test_run_reader import write_sweep

runner = CliRunner()


def document(result, model) -> dict:
    """stdout as one JSON object whose keys are `model`'s fields, every one of them."""
    assert result.stdout.count("\n") == 1, result.output
    parsed = json.loads(result.stdout)
    assert parsed["schema_version"] == SCHEMA_VERSION
    assert set(parsed) == set(model.model_fields)
    return parsed


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def no_ray(*args, **kwargs):
        raise AssertionError("reached Ray")

    monkeypatch.setattr(launch, "start_ray", no_ray)
    return tmp_path


def sweep_file(folder, **sections):
    raw = small_sweep("js", output_dir=str(folder / "sweeps" / "js"), **sections)
    return str(write_yaml(folder / "js.yaml", raw))


def test_validate_json_says_what_the_line_says(workdir):
    result = runner.invoke(app, ["validate", sweep_file(workdir), "--json"])
    assert result.exit_code == 0, result.output
    parsed = document(result, ValidateDocument)
    assert parsed["command"] == "validate" and parsed["name"] == "js" and parsed["task"] == "sft"
    assert parsed["num_trials"] == 4 and parsed["trials"] == "4 trials"
    assert parsed["searched"] == ["training.learning_rate"] and parsed["memory"] is None


def test_plan_json_holds_the_forecast_and_the_caps_and_nothing_else_on_stdout(workdir):
    result = runner.invoke(app, ["plan", sweep_file(workdir, budget={"max_steps": 100}), "--no-calibrate", "--json"])
    assert result.exit_code == 0, result.output
    parsed = document(result, PlanDocument)
    assert parsed["command"] == "plan" and parsed["concurrent_trials"] >= 1
    assert parsed["ladder"][0] == {"step": 10, "trials": 4} and parsed["ladder"][-1]["step"] == 30
    assert parsed["without_early_stopping"]["steps"] == 4 * 30
    assert parsed["expected"]["steps"] <= 100
    [cap] = parsed["caps"]
    assert cap["key"] == "max_steps" and cap["cap"] == 100
    assert parsed["timing"]["source"].startswith("throughput model")
    assert "Planned in" in result.stderr  # the terminal's lines, on stderr


@pytest.mark.parametrize("args", [
    ["validate", "nope.yaml"], ["plan", "nope.yaml"], ["status", "nope"], ["list", "--tracking-uri", "mysql://u@h/db"],
])
def test_a_refusal_under_json_is_the_keyed_line_exit_2_and_an_error_document(workdir, args):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 2, result.output
    parsed = document(result, ErrorDocument)
    assert parsed["command"] == args[0] and parsed["error"]["exit_status"] == 2
    assert result.stderr.splitlines() == [f"error: {line}" for line in parsed["error"]["lines"]]
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("json")
    write_sweep(folder, "older", {"x": ("completed", [(10, 2.0), (30, 1.7)])})
    return write_sweep(folder, "newer", {
        "a": ("completed", [(10, 2.0), (20, 1.6), (30, 1.5)]),
        "b": ("pruned", [(10, 2.4)]),
        "c": ("failed", []),
    })


def test_status_json_lists_every_trial_with_its_state_metric_and_values(store):
    result = runner.invoke(app, ["status", "newer", "--tracking-uri", store, "--json"])
    assert result.exit_code == 0, result.output
    parsed = document(result, StatusDocument)
    assert parsed["name"] == "newer" and parsed["metric"] == "eval_loss" and parsed["goal"] == "minimize"
    assert parsed["pareto_front"] is None
    trials = parsed["trials"]
    assert [(t["number"], t["state"], t["metric"]) for t in trials] == [
        (1, "completed", 1.5), (2, "pruned", 2.4), (3, "failed", None)]
    assert trials[0]["params"] == {"training.learning_rate": 0.1}  # a number, not MLflow's text
    assert trials[1]["status"] == "pruned at step 10" and trials[1]["steps"] == 10
    assert all(set(t) == set(StatusDocument.model_fields["trials"].annotation.__args__[0].model_fields) for t in trials)


def test_list_json_lists_the_sweeps_newest_first(store):
    result = runner.invoke(app, ["list", "--tracking-uri", store, "--json"])
    assert result.exit_code == 0, result.output
    parsed = document(result, ListDocument)
    assert [(s["name"], s["trials"], s["best"]) for s in parsed["sweeps"]] == [("newer", 3, 1.5), ("older", 1, 1.7)]
    assert parsed["sweeps"][0]["started"].endswith("+00:00")


def _run(states, *, interrupted=False, stop_signal=signal.SIGINT, stopped_for=None):
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=10)
    for number, state in enumerate(states, start=1):
        record = TrialRecord(trial_id=f"t{number}", number=number, params={"training.learning_rate": 0.01 * number})
        record.state = state
        if state == TrialState.COMPLETED:
            record.history.append({"step": 10, "eval_loss": 1.0 + number})
        book.trials[record.trial_id] = record
    spec = SimpleNamespace(name="s", resources=SimpleNamespace(use_gpu=False),
                           tracking=SimpleNamespace(experiment="e"), sweep_dir="sweeps/s")
    cost = SimpleNamespace(usd=0.5, accelerator_hours=0.1, tokens=1000, usd_per_million_tokens=0,
                           saved_by_pruning_usd=0.2)
    return SimpleNamespace(spec=spec, book=book, interrupted=interrupted, stop_signal=stop_signal,
                           stopped_for=stopped_for, wall_seconds=3.0, cost=cost, notes=["a note"],
                           tracking_uri="sqlite:///m.db")


@pytest.mark.parametrize(("run", "outcome", "status", "message"), [
    (_run([TrialState.COMPLETED, TrialState.PRUNED]), "finished", 0, None),
    (_run([TrialState.COMPLETED, TrialState.STOPPED], interrupted=True), "stopped", 130, None),
    (_run([TrialState.COMPLETED], interrupted=True, stop_signal=signal.SIGTERM), "stopped", 143, None),
    (_run([TrialState.COMPLETED], stopped_for="output_dir: it is full"), "fault", 1, "output_dir: it is full"),
    (_run([TrialState.PRUNED]), "no_trial_completed", 1, "no trial completed (1 started)"),
])
def test_the_summary_file_says_how_the_sweep_ended_with_the_exit_status_it_ends_with(
    tmp_path, run, outcome, status, message
):
    path = tmp_path / "summary.json"
    try:
        finish_run(run, "resume", path)
        ended = 0
    except typer.Exit as done:
        ended = done.exit_code
    except Exception as failed:  # SweepFailed: the group turns it into its exit status
        ended = failed.exit_code
    parsed = json.loads(path.read_text())
    assert set(parsed) == set(SummaryDocument.model_fields)
    assert (parsed["command"], parsed["outcome"], parsed["exit_status"], parsed["message"]) == (
        "resume", outcome, status, message)
    assert ended == status
    assert parsed["cost"] == {"usd": 0.5, "accelerator_hours": 0.1, "tokens": 1000, "saved_by_pruning_usd": 0.2}
    if outcome != "no_trial_completed":
        assert parsed["best"] == {"number": 1, "trial_id": "t1", "value": 2.0, "params": {"training.learning_rate": 0.01}}


def test_a_summary_file_that_cannot_be_written_is_refused_before_the_sweep(workdir):
    result = runner.invoke(app, ["start", sweep_file(workdir), "--summary-json", str(workdir / "no" / "s.json")])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: --summary-json: no folder {workdir / 'no'}")


def test_the_schema_page_names_every_field_of_every_document():
    page = markdown_schema()
    for model in (ValidateDocument, PlanDocument, StatusDocument, ListDocument, SummaryDocument, ErrorDocument):
        for name, field in model.model_fields.items():
            assert f"| `{name}` |" in page and field.description, (model.__name__, name)
