"""Real sweeps on a real local Ray cluster (with its dashboard), through the CLI a user runs."""

import pytest
import yaml

from tests.integration.conftest import run_cli as sweep

pytestmark = pytest.mark.integration


def test_more_trials_than_slots_finishes_with_pruning(finished_sweep):
    """5 trials on 2 slots: finished and pruned trials must give their resources back
    (the placement-group hazard) or this hangs until the timeout."""
    result = finished_sweep.result
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "Ray dashboard: http://127.0.0.1:" in out
    assert "5 trials, 2 at a time" in out
    assert "Median setup per trial" in out
    assert "Best trial" in out
    summary = next(line for line in out.splitlines() if "finished in" in line)
    pruned = int(summary.split(" pruned")[0].rsplit(" ", 1)[1])
    completed = int(summary.split(" completed")[0].rsplit(" ", 1)[1])
    assert completed >= 1 and pruned >= 1 and completed + pruned == 5, summary
    assert (finished_sweep.workdir / "sweeps" / "shared" / "optuna.db").is_file()
    assert (finished_sweep.workdir / "sweeps" / "shared" / "tokenizer" / "tokenizer.json").is_file()


def test_trials_with_two_ddp_workers(sweep_yaml, tmp_path):
    path = sweep_yaml(
        "ddp",
        search={"num_trials": 2},
        training={"max_steps": 20, "eval_every": 10},
        early_stopping={"scheduler": "none"},
        resources={"workers_per_trial": 2, "cpus_per_worker": 1},
    )
    result = sweep("start", str(path), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 trials, 1 at a time (2 worker(s) per trial)" in result.stdout
    assert "2 completed, 0 pruned, 0 failed" in result.stdout


def test_existing_sweep_is_not_overwritten(sweep_yaml, tmp_path):
    path = sweep_yaml("again")
    existing = tmp_path / "sweeps" / "again"
    existing.mkdir(parents=True)
    (existing / "keep.txt").write_text("finished work")
    result = sweep("start", str(path), cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert "name: a sweep named 'again' already exists" in result.stderr
    assert (existing / "keep.txt").read_text() == "finished work"


def test_start_validates_before_starting_anything(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "bad", "data": {"train": "missing.jsonl", "eval": "missing.jsonl"}}))
    result = sweep("start", str(bad), cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert "data.train: file" in result.stderr
    assert "Ray dashboard" not in result.stdout
    assert not (tmp_path / "sweeps").exists()
