"""Real sweeps on a real local Ray cluster (with its dashboard), through the CLI a user runs."""

import json
import os

import polars as pl
import pytest

from sweeper.plan._rungs import milestone_counts, steps_trained
from sweeper.track._store import SweepStore
from tests.integration.conftest import run_cli as sweep

pytestmark = pytest.mark.integration


@pytest.mark.story
def test_more_trials_than_slots_finishes_with_pruning(finished_sweep):
    """5 trials on 2 slots: finished and pruned trials must give their resources back
    (the placement-group hazard) or this hangs until the timeout."""
    result = finished_sweep.result
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Ray dashboard: http://127.0.0.1:" in result.stdout
    assert "Best trial" in result.stdout  # the end-of-sweep summary printed
    trials = SweepStore(finished_sweep.tracking_uri).trials("shared")
    # ASHA by promotion: the startup trial trains on unranked; of the 4 others ranked at
    # step 10, max(1, floor(4/3)) = 1 goes on.
    assert sorted(zip(trials["state"], trials["steps"])) == [("completed", 30)] * 2 + [("pruned", 10)] * 3
    assert trials["steps"].sum() == steps_trained(milestone_counts(5, [10], 30, 3, startup_trials=1)) == 90
    assert trials["status"].to_list().count("pruned at step 10") == 3
    assert trials["setup_seconds"].min() > 0
    assert (finished_sweep.workdir / "sweeps" / "shared" / "optuna.db").is_file()
    assert (finished_sweep.workdir / "sweeps" / "shared" / "tokenizer" / "tokenizer.json").is_file()


def test_the_terminal_gets_sweepers_lines_and_the_libraries_notes_go_to_driver_log(finished_sweep):
    """Before the live table: the sweep and its plan, the forecast in one line, where to
    look, in at most 15 lines; Ray's, Optuna's and Tune's own output in driver.log."""
    result = finished_sweep.result
    lines = result.stdout.splitlines()
    first_trial = next(i for i, line in enumerate(lines) if line.startswith("trial "))
    before = lines[:first_trial]
    assert len(before) <= 15, result.stdout
    assert [line.split(":")[0] for line in before if line.split(":")[0] in (
        "Sweep 'shared'", "Forecast", "Ray dashboard", "MLflow", "Sweep folder")] == [
        "Sweep 'shared'", "Forecast", "Ray dashboard", "MLflow", "Sweep folder"], result.stdout
    for noise in ("Token authentication is enabled", "A new study created", "Configuration for experiment",
                  "View detailed results here", "TensorBoard"):
        assert noise not in result.stdout + result.stderr, noise
    log = (finished_sweep.workdir / "sweeps" / "shared" / "driver.log").read_text()
    assert "A new study created" in log
    assert "Step budget by rung" in log  # the forecast's detail


def test_a_startup_trial_trains_to_the_end_whatever_its_rank(finished_sweep):
    """early_stopping.startup_trials 1 of the shared sweep's 5: the first trial the study
    gave out trains to max_steps unranked (the other 4: test_more_trials_than_slots...)."""
    import optuna

    from sweeper.search._study import STARTUP_ATTR, TUNE_TRIAL_ID_ATTR, study_url

    result, workdir = finished_sweep.result, finished_sweep.workdir
    assert result.returncode == 0, result.stdout + result.stderr
    trials = SweepStore(finished_sweep.tracking_uri).trials("shared")
    study = optuna.load_study(study_name="shared", storage=study_url(workdir / "sweeps" / "shared"))
    (startup,) = [t.user_attrs[TUNE_TRIAL_ID_ATTR] for t in study.get_trials() if t.user_attrs.get(STARTUP_ATTR)]
    assert study.get_trials()[0].user_attrs[TUNE_TRIAL_ID_ATTR] == startup
    steps = dict(zip(trials["trial_id"], trials["steps"]))
    states = dict(zip(trials["trial_id"], trials["state"]))
    assert (states[startup], steps[startup]) == ("completed", 30)
    # MLflow, the live output and `sweep status` say which trial it was.
    assert dict(zip(trials["trial_id"], trials["startup_trial"])) == {t: t == startup for t in states}
    number = dict(zip(trials["trial_id"], trials["trial_number"]))[startup]
    live_lines = [line for line in result.stdout.splitlines() if "(startup trial)" in line]
    assert [line.split(":")[0] for line in live_lines] == [f"trial {number}"], result.stdout
    status = sweep("status", "shared", cwd=workdir, timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    rows = [line.split("│") for line in status.stdout.splitlines() if line.count("│") > 3]
    marked = [int(cells[1]) for cells in rows if cells[1].strip().isdigit() and cells[-2].strip() == "yes"]
    assert marked == [number], status.stdout


def most_at_once(trials) -> int:
    """The most trials whose MLflow runs were open at the same moment (a trial paused at a
    rung keeps its run open: use it on sweeps without ASHA by promotion)."""
    events = sorted([(t, 1) for t in trials["started_ms"]] + [(t, -1) for t in trials["ended_ms"]], key=lambda e: (e[0], e[1]))
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


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
    trials = SweepStore(f"sqlite:///{tmp_path / 'mlflow.db'}").trials("ddp")
    assert trials["state"].to_list() == ["completed", "completed"]
    assert trials["steps"].to_list() == [20, 20]
    assert most_at_once(trials) == 1  # 2 workers of 1 CPU each: one trial fills the 2-CPU cluster


def test_a_paused_trial_continues_from_its_checkpoint(sweep_yaml, tmp_path):
    """ASHA by promotion on 1 slot: trial 1 (lr 1e-2, the grid's first) reaches the rung
    alone and is paused; trial 2 (lr 1e-5) arrives, the rung closes, trial 1 is the
    better and goes on from its step-10 checkpoint (in the trial process Tune reuses),
    trial 2 stops. Its losses are those of an uninterrupted run, dropout (0.05) included:
    the checkpoint carries the random state. A trial takes every CPU of the cluster, so
    the next trial starts only once the paused one has given them back."""
    common = dict(
        lora={"dropout": 0.05}, training={"max_steps": 30, "eval_every": 10, "per_device_batch_size": 8},
        resources={"cpus_per_worker": os.cpu_count()},
    )
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

    store = SweepStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    trials = store.trials("promoted")
    by_lr = {float(json.loads(row["params"])["training.learning_rate"]): row for row in trials.to_dicts()}
    winner, loser = by_lr[1e-2], by_lr[1e-5]
    assert (winner["state"], winner["steps"], winner["pauses"]) == ("completed", 30, 1)
    assert (loser["state"], loser["status"], loser["pauses"]) == ("pruned", "pruned at step 10", 0)
    history = store.history(trials=trials.filter(pl.col("run_id") == winner["run_id"])).sort("step")
    resumed = list(zip(history["step"], history["value"]))

    # The same trial trained straight through, in this process: the trial's loop as a
    # trial's worker runs it (one thread), with no Tune, pause or checkpoint between.
    straight_spec = sweep_yaml(
        "uninterrupted",
        search={"num_trials": 1, "parameters": {}},
        early_stopping={"scheduler": "none"},
        **{**common, "training": {**common["training"], "learning_rate": 1e-2}},
    )
    reports, seconds = trained_in_this_process(straight_spec)
    straight = [(report["step"], report["eval_loss"]) for report in reports]
    assert [step for step, _ in resumed] == [step for step, _ in straight] == [10, 20, 30]
    assert [loss for _, loss in resumed] == pytest.approx([loss for _, loss in straight], rel=1e-4)
    # Its cost counts the time it trained, not the time it waited: on 1 slot, the loser
    # ran from start to end while the winner waited at the rung.
    elapsed = (winner["ended_ms"] - winner["started_ms"]) / 1000
    assert winner["wall_seconds"] < elapsed - 0.5 * loser["wall_seconds"], (winner, loser)


def trained_in_this_process(path) -> tuple[list[dict], float]:
    """The reports of the one trial of the sweep at `path`, trained by its task's loop in
    this process with one thread (its one CPU), as a trial's worker trains it, and the
    seconds it took."""
    import time

    from sweeper.plan._calibrate import run_training
    from sweeper.plan._inputs import prepare_inputs
    from sweeper.spec._load import load_spec
    from trainables.models import DEFAULT_CACHE_ROOT, resolve_model_source

    spec = load_spec(path)
    data = prepare_inputs(spec, DEFAULT_CACHE_ROOT).data
    reports, started = [], time.time()
    run_training(spec, data, resolve_model_source(spec.model.name_or_path), lambda m, _: reports.append(m), started)
    return [report for report in reports if "eval_loss" in report], time.time() - started
