"""A node being taken away (trainables/preemption.py): the SFT loop, told after a step,
keeps that step in a checkpoint at once, however far its next evaluation, and trains no
further; the run started again from that checkpoint counts the move in its reports and
keeps counting through a second one. Ray Train's notice is faked (`ask`); the loop, its
checkpoints and their reports are real, on the built-in model in this process."""

import time

import pytest

from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from trainables import preemption, sft
from trainables.data import tokenize_sft
from trainables.models import BUILTIN_TINY_MODEL, load_tokenizer, resolve_model_source
from trainables.preemption import PreemptionNotice, moves_of


class Moved(Exception):
    """Stands in for Train ending the waiting worker."""


@pytest.fixture(scope="module")
def trial_and_data():
    spec = validate_spec(small_sweep("move", training={"max_steps": 12, "eval_every": 6}), base_dir=REPO)
    source = resolve_model_source(BUILTIN_TINY_MODEL)
    tokenizer = load_tokenizer(source)
    data = {split: tokenize_sft(getattr(spec.data, split), tokenizer, 64, f"data.{split}") for split in ("train", "eval")}
    return spec.trial_config(), data, source


def told_at(step: int):
    """An `ask` that answers from the given optimizer step on (it is asked once per step)."""
    asked = []

    def ask():
        asked.append(1)
        return object() if len(asked) >= step else None

    return ask


def train_until_moved(monkeypatch, trial_and_data, tmp_path, notice, resume_from=None):
    """The loop's reports (metrics, a copy of the checkpoint folder) until it waits to be moved."""
    trial, data, source = trial_and_data
    reports = []

    def keep(metrics, checkpoint_dir):
        import shutil

        target = tmp_path / f"report{len(reports)}"
        shutil.copytree(checkpoint_dir, target)
        reports.append((metrics, target))

    def ended_by_train(seconds):
        raise Moved

    monkeypatch.setattr(preemption.time, "sleep", ended_by_train)
    try:
        sft.train(trial, data, source, keep, time.time(), resume_from=resume_from, preemption=notice)
    except Moved:
        pass
    return reports


def test_told_after_a_step_the_loop_keeps_that_step_and_trains_no_further(monkeypatch, trial_and_data, tmp_path):
    reports = train_until_moved(monkeypatch, trial_and_data, tmp_path / "first", PreemptionNotice(told_at(8)))
    steps = [metrics["step"] for metrics, _ in reports]
    assert steps == [6, 8]  # the evaluation at 6, then the step told at: not the evaluation at 12
    kept, folder = reports[-1]
    assert kept == {"step": 8, "preemption_checkpoint": 1, "preemptions": 1, "preempted_at_step": 8}
    assert moves_of(str(folder)) == {"preemptions": 1, "preempted_at_step": 8}
    assert (folder / "adapter_model.safetensors").is_file()

    # Started again from it (another node): from step 9, the move in every report, and a
    # second move counted on from there.
    again = train_until_moved(
        monkeypatch, trial_and_data, tmp_path / "second", PreemptionNotice(told_at(3), moves_of(str(folder))),
        resume_from=str(folder),
    )
    assert [metrics["step"] for metrics, _ in again] == [11]
    assert again[0][0]["preemptions"] == 2 and again[0][0]["preempted_at_step"] == 11


def test_after_the_move_the_run_reports_it_at_each_evaluation(monkeypatch, trial_and_data, tmp_path):
    reports = train_until_moved(monkeypatch, trial_and_data, tmp_path / "first", PreemptionNotice(told_at(3)))
    _, folder = reports[-1]
    finished = train_until_moved(
        monkeypatch, trial_and_data, tmp_path / "rest", PreemptionNotice(lambda: None, moves_of(str(folder))),
        resume_from=str(folder),
    )
    assert [(m["step"], m["preemptions"], m["preempted_at_step"]) for m, _ in finished] == [(6, 1, 3), (12, 1, 3)]


def test_told_at_its_last_step_the_run_just_finishes(monkeypatch, trial_and_data, tmp_path):
    # Its last evaluation's checkpoint is the end: nothing is left to move (a worker that
    # waited instead would hold the finished trial until the deadline).
    reports = train_until_moved(monkeypatch, trial_and_data, tmp_path, PreemptionNotice(told_at(12)))
    assert [(metrics["step"], "preemptions" in metrics) for metrics, _ in reports] == [(6, False), (12, False)]
    assert not PreemptionNotice(None).arrived()  # outside a Train run nothing tells it
