"""What a sweep leaves in MLflow, checked with MlflowClient against a real store."""

from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from sweeper.spec._load import validate_spec
from sweeper.spec._overrides import with_overrides
from tests.integration.conftest import run_cli

pytestmark = pytest.mark.integration


def runs_of(client: MlflowClient, sweep_name: str):
    experiment = client.get_experiment_by_name("sweeper")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`sweeper.sweep_name` = '{sweep_name}'")
    parents = [r for r in runs if r.data.tags["sweeper.kind"] == "sweep"]
    children = [r for r in runs if r.data.tags["sweeper.kind"] == "trial"]
    return parents, children


def test_parent_and_child_runs(finished_sweep):
    assert finished_sweep.result.returncode == 0, finished_sweep.result.stderr
    client = MlflowClient(finished_sweep.tracking_uri)
    (parent,), children = runs_of(client, "shared")
    assert len(children) == 5
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert all(r.info.status != "RUNNING" for r in [parent, *children])

    tags = parent.data.tags
    for key in ("sweeper.config_hash", "sweeper.versions.torch", "sweeper.versions.ray", "sweeper.versions.optuna",
                "sweeper.data_sha256.train", "sweeper.data_sha256.eval", "sweeper.hardware"):
        assert tags[key], key
    assert parent.data.params["training.max_steps"] == "30"
    assert parent.data.metrics["trials_total"] == 5
    assert parent.data.metrics["trials_completed"] + parent.data.metrics["trials_pruned"] == 5

    for child in children:
        state = child.data.tags["sweeper.state"]
        status = child.data.tags["sweeper.status"]
        history = client.get_metric_history(child.info.run_id, "eval_loss")
        steps = [p.step for p in history]
        assert steps == list(range(10, steps[-1] + 1, 10))
        assert len(client.get_metric_history(child.info.run_id, "train_loss")) == len(steps)
        assert len(client.get_metric_history(child.info.run_id, "learning_rate")) == len(steps)
        assert len(client.get_metric_history(child.info.run_id, "tokens_per_second")) == len(steps)
        assert child.data.metrics["setup_seconds"] > 0
        assert "training.learning_rate" in child.data.params
        if state == "completed":
            assert (status, child.info.status, steps[-1]) == ("completed", "FINISHED", 30)
        else:
            assert state == "pruned" and child.info.status == "KILLED"
            assert status == f"pruned at step {steps[-1]}" and steps[-1] < 30


def test_best_config_trains_the_best_trial(finished_sweep, tmp_path):
    client = MlflowClient(finished_sweep.tracking_uri)
    (parent,), children = runs_of(client, "shared")
    best_child = next(c for c in children if c.info.run_id == parent.data.tags["sweeper.best_run_id"])
    completed = [c for c in children if c.data.tags["sweeper.state"] == "completed"]
    assert best_child.data.metrics["eval_loss"] == min(c.data.metrics["eval_loss"] for c in completed)
    assert parent.data.metrics["best_eval_loss"] == best_child.data.metrics["eval_loss"]

    text = Path(client.download_artifacts(parent.info.run_id, "best_config.yaml", str(tmp_path))).read_text()
    best = validate_spec(yaml.safe_load(text), base_dir=tmp_path)
    assert best.search.parameters == {} and best.search.num_trials == 1
    for path, value in best_child.data.params.items():
        section, field = path.split(".")
        assert str(getattr(getattr(best, section), field)) == value
    # The rest of the config is the sweep's own.
    sweep_spec = validate_spec(yaml.safe_load(finished_sweep.yaml.read_text()), base_dir=finished_sweep.workdir)
    expected = with_overrides(sweep_spec, {k: float(v) for k, v in best_child.data.params.items()})
    assert best.training == expected.training and best.lora == expected.lora


def test_costs_add_up(finished_sweep):
    client = MlflowClient(finished_sweep.tracking_uri)
    (parent,), children = runs_of(client, "shared")
    total = sum(c.data.metrics["cost_usd"] for c in children)
    assert parent.data.metrics["cost_usd_total"] == pytest.approx(total)
    saved = sum(c.data.metrics["cost_usd_saved_by_pruning"] for c in children)
    assert parent.data.metrics["cost_usd_saved_by_pruning"] == pytest.approx(saved)
    for child in children:
        metrics = child.data.metrics
        # CPU trial: 1 worker x 1 core, priced at the table's cpu rate.
        assert metrics["accelerator_hours"] == pytest.approx(metrics["wall_seconds"] / 3600)
        assert metrics["cost_usd"] == pytest.approx(metrics["accelerator_hours"] * 0.05)
        assert metrics["tokens"] > 0
        if child.data.tags["sweeper.state"] == "pruned":
            assert metrics["cost_usd_saved_by_pruning"] > 0
        else:
            assert metrics["cost_usd_saved_by_pruning"] == 0
    assert "Cost: $" in finished_sweep.result.stdout and "pruning saved $" in finished_sweep.result.stdout


def test_list_and_status_read_the_store(finished_sweep):
    listing = run_cli("list", cwd=finished_sweep.workdir, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert "shared" in listing.stdout and "finished" in listing.stdout
    status = run_cli("status", "shared", cwd=finished_sweep.workdir, timeout=120)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("pruned at step") + status.stdout.count("completed") == 5
    unknown = run_cli("status", "nope", cwd=finished_sweep.workdir, timeout=120)
    assert unknown.returncode == 2
    assert "no sweep named 'nope'" in unknown.stderr and "known sweeps: shared" in unknown.stderr
