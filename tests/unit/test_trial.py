"""A trial's side of Ray without a cluster: what Tune reserves for each shape of trial,
what a Train report tells Tune, where a one-worker trial's checkpoints go and which one a
retried trial starts from, and what one trial gives back to the process Tune reuses.
tests/integration/test_ray_adapter.py runs both shapes on a real cluster."""

import os
import queue
import random

import pytest

import sweeper.run._trial
from sweeper.cluster._connect import TRIAL_SETTINGS
from sweeper.run._trial import TrialStorage, fit_reporting_to_tune, trial_process, trial_resources, tune_result
from trainables.common import REPORT_FILE
from trainables.resources import ResourcesSpec


def test_a_train_report_reaches_tune_with_its_checkpoint_path_and_a_preemption_checkpoint_does_not():
    import pyarrow.fs
    from ray.train import Checkpoint

    local = Checkpoint("/sweeps/x/trials/t1/checkpoint_000001", filesystem=pyarrow.fs.LocalFileSystem())
    assert tune_result([{"step": 10, "eval_loss": 4.2}, {"step": 10}], local) == {
        "step": 10, "eval_loss": 4.2, "checkpoint_path": "/sweeps/x/trials/t1/checkpoint_000001",
    }
    assert tune_result([{"step": 20, "eval_loss": 4.0}], None) == {"step": 20, "eval_loss": 4.0}
    assert tune_result([{"step": 7, "preemption_checkpoint": 1, "preemptions": 1}], None) is None


class HandedOver:
    """A several-worker trial's report queue (ray.util.queue.Queue's get and shutdown) over
    a local queue, for a trainer that puts its reports from another thread."""

    def __init__(self):
        self.queue = queue.Queue(maxsize=1)
        self.shut = False

    def get(self, timeout):
        from ray.util.queue import Empty

        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            raise Empty from None

    def shutdown(self, force):
        self.shut = True


class RunThatReports:
    """A Train run that puts `steps` reports, the last one just before it ends (as the
    controller does), then ends, or fails with `error`."""

    def __init__(self, reports: HandedOver, steps: list[int], error: Exception | None = None):
        self.reports, self.steps, self.error = reports, steps, error

    def fit(self):
        for step in self.steps:
            self.reports.queue.put({"step": step})
        if self.error is not None:
            raise self.error


def test_every_report_of_a_several_worker_trial_reaches_tune_before_the_trial_ends(monkeypatch):
    reported = []
    monkeypatch.setattr(sweeper.run._trial.tune, "report", reported.append)
    reports = HandedOver()
    fit_reporting_to_tune(RunThatReports(reports, [30, 60, 90, 120]), reports)
    assert reported == [{"step": 30}, {"step": 60}, {"step": 90}, {"step": 120}]
    assert reports.shut


def test_a_several_worker_trial_whose_run_fails_reports_what_came_before_then_raises_the_runs_error(monkeypatch):
    reported = []
    monkeypatch.setattr(sweeper.run._trial.tune, "report", reported.append)
    reports = HandedOver()
    with pytest.raises(RuntimeError, match="worker died"):
        fit_reporting_to_tune(RunThatReports(reports, [30], RuntimeError("worker died")), reports)
    assert reported == [{"step": 30}] and reports.shut


def test_a_checkpoint_in_object_storage_reaches_tune_as_its_uri():
    import pyarrow.fs
    from ray.train import Checkpoint

    s3 = pyarrow.fs.S3FileSystem(region="us-east-1", endpoint_override="http://127.0.0.1:9", anonymous=True)
    checkpoint = Checkpoint("team/x/trials/t1/checkpoint_000001", filesystem=s3)
    assert tune_result([{"step": 10}], checkpoint) == {"step": 10, "checkpoint_path": "s3://team/x/trials/t1/checkpoint_000001"}


def test_a_one_worker_trial_holds_its_workers_resources_and_a_several_worker_trial_a_sliver_on_the_head():
    assert trial_resources(ResourcesSpec(cpus_per_worker=2, custom={"trainer": 1})) == {"cpu": 2, "trainer": 1}
    assert trial_resources(ResourcesSpec(use_gpu=True, gpus_per_worker=0.5)) == {"cpu": 1, "gpu": 0.5}
    waiting = trial_resources(ResourcesSpec(workers_per_trial=2))
    assert waiting["cpu"] == 0 and "node:__internal_head__" in waiting


def checkpoint_of(tmp_path, step: int) -> str:
    folder = tmp_path / f"made-{step}"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    (folder / REPORT_FILE).write_text(f'{{"step": {step}}}')
    return str(folder)


def test_a_one_worker_trial_keeps_its_latest_checkpoint_in_its_trials_folder_and_reports_its_path(tmp_path, monkeypatch):
    reported = []
    monkeypatch.setattr(sweeper.run._trial.tune, "report", reported.append)
    trial_uri = str(tmp_path / "trials" / "t1")
    session = TrialStorage(trial_uri)
    with session.latest_checkpoint() as nothing:
        assert nothing is None
    session.report({"step": 10, "eval_loss": 4.2}, checkpoint_of(tmp_path, 10))
    session.report({"step": 15, "train_loss": 4.0}, None)
    session.report({"step": 20, "eval_loss": 4.0}, checkpoint_of(tmp_path, 20))
    session.report({"step": 21, "preemption_checkpoint": 1}, None)  # Train's alone: never Tune's
    assert reported == [
        {"step": 10, "eval_loss": 4.2, "checkpoint_path": f"{trial_uri}/checkpoint_000010"},
        {"step": 15, "train_loss": 4.0},
        {"step": 20, "eval_loss": 4.0, "checkpoint_path": f"{trial_uri}/checkpoint_000020"},
    ]
    assert sorted(os.listdir(trial_uri)) == ["checkpoint_000020"]  # one a trial, as Train keeps
    with TrialStorage(trial_uri).latest_checkpoint() as latest:  # the retried trial's session
        assert latest == f"{trial_uri}/checkpoint_000020"
        assert open(os.path.join(latest, "adapter_model.safetensors"), "rb").read() == b"weights"


def test_a_checkpoint_copied_only_in_part_is_not_the_one_a_retried_trial_starts_from(tmp_path, monkeypatch):
    monkeypatch.setattr(sweeper.run._trial.tune, "report", lambda result: None)
    trial_uri = str(tmp_path / "t1")
    TrialStorage(trial_uri).report({"step": 10}, checkpoint_of(tmp_path, 10))
    os.makedirs(f"{trial_uri}/checkpoint_000020")  # killed while copying: no report in it yet
    with TrialStorage(trial_uri).latest_checkpoint() as latest:
        assert latest == f"{trial_uri}/checkpoint_000010"


def test_what_one_trial_changes_in_the_reused_process_is_given_back(monkeypatch):
    import numpy
    import torch

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    threads = torch.get_num_threads()
    random.seed(1), numpy.random.seed(1), torch.manual_seed(1)
    before = random.random(), numpy.random.rand(), torch.rand(1).item()
    random.seed(1), numpy.random.seed(1), torch.manual_seed(1)
    with trial_process(ResourcesSpec(use_gpu=False)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ""  # a CPU trial sees no GPU
        os.environ["HF_HUB_OFFLINE"] = "1"
        torch.set_num_threads(threads + 1)
        random.seed(7), numpy.random.seed(7), torch.manual_seed(7)
        random.random(), numpy.random.rand(), torch.rand(1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0" and "HF_HUB_OFFLINE" not in os.environ
    assert torch.get_num_threads() == threads
    assert (random.random(), numpy.random.rand(), torch.rand(1).item()) == before


def test_a_failed_trial_gives_the_process_back_too(monkeypatch):
    import torch

    threads = torch.get_num_threads()
    with pytest.raises(ValueError), trial_process(ResourcesSpec()):
        os.environ["SWEEPER_TEST_LEFTOVER"] = "1"
        torch.set_num_threads(threads + 1)
        raise ValueError("loss is nan at step 15")
    assert "SWEEPER_TEST_LEFTOVER" not in os.environ and torch.get_num_threads() == threads


def test_a_cpu_trials_workers_see_no_gpu_and_a_gpu_trials_keep_rays():
    """Ray sets CUDA_VISIBLE_DEVICES only for workers holding GPUs; a CPU trial's workers
    get it empty from their runtime environment, set before their process starts."""
    from sweeper.run._trial import worker_runtime_env

    assert worker_runtime_env(ResourcesSpec(use_gpu=False)) == {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}
    assert worker_runtime_env(ResourcesSpec(use_gpu=True, gpus_per_worker=1)) == {}


def test_trial_settings_are_strings_for_the_environment():
    assert all(isinstance(value, str) for value in TRIAL_SETTINGS.values())
    assert float(TRIAL_SETTINGS["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"]) < 2.0
