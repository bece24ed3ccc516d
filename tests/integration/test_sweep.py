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
    # ASHA by promotion: of 5 trials ranked at step 10, max(1, floor(5/3)) = 1 goes on.
    assert "Budget: at most 70 training steps (5 to step 10, 1 to step 30); 150 without early stopping" in out
    assert (completed, pruned) == (1, 4), summary
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


def test_a_paused_trial_continues_from_its_checkpoint(sweep_yaml, tmp_path):
    """ASHA by promotion on 1 slot: trial 1 (lr 1e-2, the grid's first) reaches the rung
    alone and is paused; trial 2 (lr 1e-5) arrives, the rung closes, trial 1 is the
    better and goes on from its step-10 checkpoint in a new Train run, trial 2 stops.
    Without dropout the resumed trial's losses are those of an uninterrupted run."""
    from mlflow.tracking import MlflowClient

    from tests.integration.test_tracking import runs_of

    common = dict(lora={"dropout": 0.0}, training={"max_steps": 30, "eval_every": 10, "per_device_batch_size": 8})
    promoted = sweep_yaml(
        "promoted",
        search={
            "method": "grid",
            "num_trials": 2,
            "max_concurrent_trials": 1,
            "parameters": {"training.learning_rate": {"distribution": "categorical", "values": [1e-5, 1e-2]}},
        },
        **common,
    )
    result = sweep("start", str(promoted), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 completed, 1 pruned, 0 failed" in result.stdout

    uninterrupted = sweep_yaml(
        "uninterrupted",
        search={"num_trials": 1, "parameters": {}},
        early_stopping={"scheduler": "none"},
        **{**common, "training": {**common["training"], "learning_rate": 1e-2}},
    )
    result = sweep("start", str(uninterrupted), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    _, trials = runs_of(client, "promoted")
    by_lr = {float(t.data.params["training.learning_rate"]): t for t in trials}
    winner, loser = by_lr[1e-2], by_lr[1e-5]
    assert (winner.data.tags["sweeper.state"], winner.data.metrics["pauses"]) == ("completed", 1)
    assert (loser.data.tags["sweeper.status"], loser.data.metrics["pauses"]) == ("pruned at step 10", 0)
    (reference,) = runs_of(client, "uninterrupted")[1]

    def losses(run):
        return [(p.step, p.value) for p in client.get_metric_history(run.info.run_id, "eval_loss")]

    resumed, straight = losses(winner), losses(reference)
    assert [step for step, _ in resumed] == [step for step, _ in straight] == [10, 20, 30]
    assert [loss for _, loss in resumed] == pytest.approx([loss for _, loss in straight], rel=1e-4)
    # Its cost counts the time it trained, not the time it waited.
    assert winner.data.metrics["wall_seconds"] < reference.data.metrics["wall_seconds"] * 2 + 10
