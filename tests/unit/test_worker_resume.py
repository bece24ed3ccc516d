"""What a Train worker says before it trains on from a checkpoint (trainables/worker.py),
with Ray Train's calls stood in for: the checkpoint's own report first, without a
checkpoint, so that an evaluation saved but never recorded (a driver stopped or killed
between the checkpoint reaching storage and its report reaching the driver) is recorded
when the trial goes on; a checkpoint at max_steps ends the run with its report."""

import contextlib
import json
import sys
import types

import pytest

import trainables.worker as worker
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from trainables.common import REPORT_FILE


class FakeCheckpoint:
    def __init__(self, folder):
        self.folder = folder

    def as_directory(self):
        return contextlib.nullcontext(str(self.folder))


@pytest.fixture
def run_worker(monkeypatch, tmp_path):
    """Run train_loop_per_worker from a checkpoint whose report.json says `saved`; what it
    sent to Ray Train (metrics, checkpoint folder or None) and what the task's loop got."""

    def run(saved: dict | None, max_steps: int = 30):
        folder = tmp_path / "checkpoint"
        folder.mkdir()
        if saved is not None:
            (folder / REPORT_FILE).write_text(json.dumps(saved))
        sent, trained = [], []
        monkeypatch.setattr(worker.ray.train, "get_checkpoint", lambda: FakeCheckpoint(folder))
        monkeypatch.setattr(worker.ray.train, "report", lambda metrics, checkpoint=None: sent.append(
            (metrics, checkpoint and checkpoint.path)))
        monkeypatch.setattr(worker.ray.train, "get_context", lambda: types.SimpleNamespace(get_world_rank=lambda: 0))
        monkeypatch.setattr(worker.ray, "get", lambda ref: {"train": [], "eval": []})
        monkeypatch.setattr(worker.ray.util, "get_current_placement_group", lambda: None)
        monkeypatch.setattr(worker, "resolve_model_source", lambda name, cache_root: name)
        monkeypatch.setattr(worker, "train_notice", lambda moves=None: moves)
        task = types.SimpleNamespace(train=lambda *args, **kwargs: trained.append(kwargs))
        monkeypatch.setitem(sys.modules, "trainables.sft", task)  # what import_module finds first
        spec = validate_spec(small_sweep("w", training={"max_steps": max_steps, "eval_every": 10}), base_dir=REPO)
        config = {"trial": spec.trial_config(), "data": {"ref": None}, "cache_root": tmp_path, "started_at": 0.0}
        worker.train_loop_per_worker(config)
        return sent, trained, str(folder)

    return run


def test_a_run_going_on_from_a_checkpoint_first_says_its_report_again_without_the_checkpoint(run_worker):
    saved = {"step": 10, "eval_loss": 3.0}
    sent, trained, folder = run_worker(saved)
    assert sent == [(saved, None)]  # no checkpoint: it is the one the run starts from
    (loop,) = trained
    assert loop["resume_from"] == folder


def test_a_checkpoint_at_max_steps_ends_the_run_with_its_report(run_worker):
    saved = {"step": 30, "eval_loss": 2.5}
    sent, trained, folder = run_worker(saved, max_steps=30)
    ((metrics, checkpoint),) = sent  # the run's one report, its setup phases with it
    assert {key: metrics[key] for key in saved} == saved and checkpoint == folder and trained == []


def test_a_checkpoint_without_a_report_trains_on_saying_nothing_first(run_worker):
    sent, trained, folder = run_worker(None)
    assert sent == [] and trained[0]["resume_from"] == folder
