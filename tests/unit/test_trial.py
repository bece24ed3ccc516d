"""A trial's Train reports reach Tune with their checkpoint path; the settings its
processes get are environment strings. How the trial's TorchTrainer runs and stops is
tested in tests/unit/test_ray_adapter.py and tests/integration/test_ray_adapter.py."""

import sweeper.run._trial
from sweeper.cluster._connect import TRIAL_SETTINGS
from sweeper.run._trial import ReportToTune


def test_reports_reach_tune_with_the_checkpoint_path(monkeypatch):
    import pyarrow.fs
    from ray.train import Checkpoint

    reported = []
    monkeypatch.setattr(sweeper.run._trial.tune, "report", reported.append)
    local = Checkpoint("/sweeps/x/trials/t1/checkpoint_000001", filesystem=pyarrow.fs.LocalFileSystem())
    ReportToTune().after_report(None, [{"step": 10, "eval_loss": 4.2}, {"step": 10}], local)
    ReportToTune().after_report(None, [{"step": 20, "eval_loss": 4.0}], None)
    assert reported == [
        {"step": 10, "eval_loss": 4.2, "checkpoint_path": "/sweeps/x/trials/t1/checkpoint_000001"},
        {"step": 20, "eval_loss": 4.0},
    ]


def test_a_checkpoint_in_object_storage_reaches_tune_as_its_uri(monkeypatch):
    import pyarrow.fs
    from ray.train import Checkpoint

    reported = []
    monkeypatch.setattr(sweeper.run._trial.tune, "report", reported.append)
    s3 = pyarrow.fs.S3FileSystem(region="us-east-1", endpoint_override="http://127.0.0.1:9", anonymous=True)
    ReportToTune().after_report(None, [{"step": 10}], Checkpoint("team/x/trials/t1/checkpoint_000001", filesystem=s3))
    assert reported == [{"step": 10, "checkpoint_path": "s3://team/x/trials/t1/checkpoint_000001"}]


def test_reports_after_a_worker_failure_count_the_restarts(monkeypatch):
    reported = []
    monkeypatch.setattr(sweeper.run._trial.tune, "report", reported.append)
    callback = ReportToTune()
    callback.after_report(None, [{"step": 10}], None)
    callback.after_exception(None, {0: RuntimeError("node lost")})
    callback.after_report(None, [{"step": 20}], None)
    callback.after_exception(None, {1: RuntimeError("out of memory")})
    callback.after_report(None, [{"step": 30}], None)
    assert reported == [{"step": 10}, {"step": 20, "restarts": 1}, {"step": 30, "restarts": 2}]


def test_trial_settings_are_strings_for_the_environment():
    assert all(isinstance(value, str) for value in TRIAL_SETTINGS.values())
    assert float(TRIAL_SETTINGS["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"]) < 2.0


def test_a_preemption_checkpoint_is_kept_from_tune(monkeypatch):
    reported = []
    monkeypatch.setattr(sweeper.run._trial.tune, "report", reported.append)
    callback = ReportToTune()
    callback.after_report(None, [{"step": 7, "preemption_checkpoint": 1, "preemptions": 1}], None)
    callback.after_report(None, [{"step": 10, "eval_loss": 4.0, "preemptions": 1, "preempted_at_step": 7}], None)
    assert reported == [{"step": 10, "eval_loss": 4.0, "preemptions": 1, "preempted_at_step": 7}]


def test_a_cpu_trials_workers_see_no_gpu_and_a_gpu_trials_keep_rays():
    """Ray sets CUDA_VISIBLE_DEVICES only for workers holding GPUs; a CPU trial's workers
    get it empty from their runtime environment, set before their process starts."""
    from sweeper.run._trial import worker_runtime_env
    from trainables.resources import ResourcesSpec

    assert worker_runtime_env(ResourcesSpec(use_gpu=False)) == {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}
    assert worker_runtime_env(ResourcesSpec(use_gpu=True, gpus_per_worker=1)) == {}


def test_on_the_public_path_a_trial_restarts_its_run_only_after_a_worker_failure_while_tune_keeps_it():
    from ray.train import ControllerError, WorkerGroupError

    from sweeper.run._trial import retry_run

    workers_failed = WorkerGroupError("training failed", {0: RuntimeError("node lost")})
    running, ended = (lambda: False), (lambda: True)
    assert retry_run(workers_failed, restarts=0, max_failures=1, trial_ended=running)
    assert not retry_run(workers_failed, restarts=1, max_failures=1, trial_ended=running)  # retries spent
    assert not retry_run(workers_failed, restarts=0, max_failures=0, trial_ended=running)
    # Tune ended the trial (its placement group removed): the failure is that ending, no new run.
    assert not retry_run(workers_failed, restarts=0, max_failures=1, trial_ended=ended)
    assert not retry_run(ControllerError(RuntimeError("controller")), restarts=0, max_failures=1, trial_ended=running)
    assert not retry_run(RuntimeError("the trial's own error"), restarts=0, max_failures=1, trial_ended=running)


def test_a_restarted_runs_reports_carry_the_restarts_before_it(monkeypatch):
    reported = []
    monkeypatch.setattr(sweeper.run._trial.tune, "report", reported.append)
    ReportToTune(worker_failures=1).after_report(None, [{"step": 20}], None)
    assert reported == [{"step": 20, "restarts": 1}]
