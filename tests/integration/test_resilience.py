"""Faults with real processes and signals: failing trials, a stopped sweep, a killed
driver, and bad input at start."""

import re

import pytest

from tests.conftest import small_sweep, wait_for, write_yaml
from tests.integration.conftest import kill_driver_and_its_cluster, run_cli, start_driver, sweep_runs

pytestmark = pytest.mark.integration


def test_failing_trials_are_retried_then_failed_while_the_sweep_completes(tmp_path):
    raw = small_sweep(
        "faults",
        training={"max_steps": 20, "eval_every": 10},
        search={"method": "grid", "num_trials": 4, "max_failures": 1,
                "parameters": {"chaos.fault": {"distribution": "categorical",
                                               "values": ["none", "exception", "nan_loss", "kill_worker"]}}},
        chaos={"at_step": 15},
        early_stopping={"scheduler": "none"},
    )
    result = run_cli("start", str(write_yaml(tmp_path / "faults.yaml", raw)), cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 completed, 0 pruned, 3 failed" in result.stdout
    (parent,), children = sweep_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "faults")
    by_fault = {c.data.params["chaos.fault"]: c for c in children}
    assert by_fault["none"].data.tags["sweeper.status"] == "completed"
    reasons = {fault: by_fault[fault].data.tags["sweeper.status"] for fault in ("exception", "nan_loss", "kill_worker")}
    assert "injected exception at step 15" in reasons["exception"], reasons
    assert "loss is nan at step 15" in reasons["nan_loss"], reasons
    for fault in ("exception", "nan_loss", "kill_worker"):
        assert by_fault[fault].info.status == "FAILED"
    for fault in ("exception", "nan_loss"):
        # The step-10 report (and checkpoint) came before the fault at step 15.
        assert by_fault[fault].data.metrics["steps_trained"] == 10
    # A worker killed shortly after a report can take that report with it: Ray Train's
    # controller collects reports by polling the workers.
    assert by_fault["kill_worker"].data.metrics["steps_trained"] in (0, 10)
    assert reasons["kill_worker"].startswith("failed: a worker process died (killed, out of memory, or crashed)")
    assert parent.info.status == "FINISHED"
    # Tune retried each faulty trial once from its latest checkpoint (max_failures: 1),
    # and its reason says so.
    for fault in ("exception", "nan_loss", "kill_worker"):
        assert reasons[fault].endswith(" (also after 1 retry(ies) from its latest checkpoint)"), reasons

def eval_history(uri: str, run_id: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    return sorted((p.step, p.value) for p in MlflowClient(uri).get_metric_history(run_id, "eval_loss"))


@pytest.mark.story
def test_stop_kill_and_resume_keep_every_finished_trial(tmp_path):
    # With a startup trial: the trials each resumed driver starts get their marks from the
    # searcher, which rebuilt them from the study, so no other trial becomes one. Six
    # trials: some are still to start when the cluster is lost.
    TRIALS = 6
    raw = small_sweep(
        "resumable", search={"num_trials": TRIALS, "seed": 5}, training={"max_steps": 30, "eval_every": 10},
        early_stopping={"startup_trials": 1},
    )
    path = write_yaml(tmp_path / "resumable.yaml", raw)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def all_children():
        try:
            return sweep_runs(uri, "resumable")[1]
        except Exception:
            return []

    def finished_children():
        return [c for c in all_children() if c.data.tags.get("sweeper.state") in ("completed", "pruned")]

    # 1. Stop from another terminal once a trial has finished.
    driver = start_driver("start", str(path), cwd=tmp_path)
    wait_for(lambda: len(finished_children()) >= 1, 600, "a finished trial", every=0.5)
    stop = run_cli("stop", "resumable", cwd=tmp_path, timeout=400)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert driver.wait(timeout=120) == 130
    (parent,), children = sweep_runs(uri, "resumable")
    assert parent.info.status == "KILLED" and parent.data.tags["sweeper.status"] == "stopped"
    assert all(c.info.status != "RUNNING" for c in children)
    kept = {c.data.tags["sweeper.trial_id"]: c.data.metrics["eval_loss"] for c in finished_children()}

    # 2. Resume, then lose the whole cluster once one more trial has finished: kill -9 the
    # driver and every process under it at once (its local Ray cluster: GCS, raylet,
    # dashboard, trial actors, Train workers), as a machine that goes away.
    # Tune's own periodic saves (every 10 s or more) made rare: a trial this driver starts
    # must be in Tune's saved state from its start on, whenever the loss comes.
    driver = start_driver("resume", "resumable", cwd=tmp_path, env={"TUNE_GLOBAL_CHECKPOINT_S": "3600"})
    wait_for(lambda: len(finished_children()) > len(kept), 600, "a trial finished after resume")
    # Where a trial is still to start, the loss comes as soon as its run appears (polled
    # every 0.5 s: a tighter poll of the SQLite store competes with the sweep's own writes).
    started = len(all_children())
    if started < TRIALS:
        wait_for(lambda: len(all_children()) > started, 300, "the next trial's start", every=0.5)
    kill_driver_and_its_cluster(driver)
    _, children = sweep_runs(uri, "resumable")
    numbers_before = {c.data.tags["sweeper.trial_id"]: c.data.tags["sweeper.trial_number"] for c in children}
    evaluations_before = {c.data.tags["sweeper.trial_id"]: eval_history(uri, c.info.run_id) for c in children}

    # 3. Resume again to the end, on a new cluster.
    result = run_cli("resume", "resumable", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    (parent,), children = sweep_runs(uri, "resumable")
    trial_ids = [c.data.tags["sweeper.trial_id"] for c in children]
    assert len(trial_ids) == len(set(trial_ids)) == TRIALS, trial_ids
    assert all(c.info.status != "RUNNING" for c in [parent, *children])
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials_total"] == TRIALS
    final = {c.data.tags["sweeper.trial_id"]: c for c in children}
    for trial_id, eval_loss in kept.items():
        assert final[trial_id].data.metrics["eval_loss"] == eval_loss
        assert final[trial_id].data.tags["sweeper.state"] in ("completed", "pruned")
    assert {c.data.tags["sweeper.state"] for c in children} <= {"completed", "pruned"}
    assert sum(c.data.tags.get("sweeper.startup_trial") == "true" for c in children) == 1
    # After the whole cluster was lost: every trial keeps its number, and every evaluation
    # made before the loss is there once with its value (so the rungs rank as before); no
    # step is evaluated twice, in MLflow or in the Optuna study.
    assert {trial_id: final[trial_id].data.tags["sweeper.trial_number"] for trial_id in numbers_before} == numbers_before
    evaluations = {trial_id: eval_history(uri, c.info.run_id) for trial_id, c in final.items()}
    for trial_id, history in evaluations.items():
        steps = [step for step, _ in history]
        assert steps == sorted(set(steps)), (trial_id, history)
        assert set(evaluations_before.get(trial_id, [])) <= set(history), (trial_id, evaluations_before[trial_id], history)
    import optuna

    from sweeper.search._study import TUNE_TRIAL_ID_ATTR, study_url

    study = optuna.load_study(study_name="resumable", storage=study_url(tmp_path / "sweeps" / "resumable"))
    told = {t.user_attrs[TUNE_TRIAL_ID_ATTR]: t for t in study.get_trials() if TUNE_TRIAL_ID_ATTR in t.user_attrs}
    assert sorted(told) == sorted(trial_ids), told
    # A trial a killed driver had asked Optuna for but not yet started ends as FAIL.
    assert {t.state.name for t in study.get_trials() if TUNE_TRIAL_ID_ATTR not in t.user_attrs} <= {"FAIL"}
    for trial_id, history in evaluations.items():
        assert sorted(told[trial_id].intermediate_values.items()) == history, (trial_id, told[trial_id].intermediate_values, history)


@pytest.mark.parametrize(
    "case, sections, expected",
    [
        ("too_many_gpus", {"resources": {"use_gpu": True}}, r"error: resources.gpus_per_worker: 1 GPUs per worker, but the largest node has 0"),
        ("too_many_cpus", {"resources": {"workers_per_trial": 64}}, r"error: resources.workers_per_trial: one trial needs 64 CPUs"),
    ],
)
@pytest.mark.story
def test_bad_input_at_start_is_one_keyed_line_and_starts_nothing(tmp_path, case, sections, expected):
    # What only the cluster can refuse (its nodes' CPUs and GPUs); bad data or a missing
    # model is refused before Ray starts: tests/unit/test_start_input.py.
    path = write_yaml(tmp_path / f"{case}.yaml", small_sweep(case, **sections))
    result = run_cli("start", str(path), cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and re.match(expected, errors[0]), errors
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "sweeps").exists()
    assert not (tmp_path / "mlflow.db").exists() or not sweep_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", case)[0]
