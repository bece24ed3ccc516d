"""A checkpoint carries the report it was taken with, so that a run restarted at its last
step (its driver died before recording that report) can report it again, and each
worker's random state, so that a continued run draws what an uninterrupted one would."""

import json
import random

import torch

from trainables.common import REPORT_FILE, Workers, checkpoint_report, final_report_of, restore_random_state, save_random_state


def test_the_final_report_comes_back_only_for_a_run_at_its_end(tmp_path):
    assert final_report_of(str(tmp_path), max_steps=30) is None  # a checkpoint from before
    (tmp_path / REPORT_FILE).write_text(json.dumps({"step": 20, "eval_loss": 4.0}))
    assert final_report_of(str(tmp_path), max_steps=30) is None  # training goes on
    (tmp_path / REPORT_FILE).write_text(json.dumps({"step": 30, "eval_loss": 3.9}))
    assert final_report_of(str(tmp_path), max_steps=30) == {"step": 30, "eval_loss": 3.9}


def test_a_checkpoint_gives_back_the_report_it_was_taken_with(tmp_path):
    assert checkpoint_report(str(tmp_path)) is None
    (tmp_path / REPORT_FILE).write_text(json.dumps({"step": 20, "eval_loss": 4.0}))
    assert checkpoint_report(str(tmp_path)) == {"step": 20, "eval_loss": 4.0}


def dropout_draws() -> tuple:
    """What LoRA dropout and anything seeded from Python would draw next."""
    return torch.nn.functional.dropout(torch.ones(32), p=0.5).tolist(), random.random()


def test_a_worker_continues_its_random_streams_from_the_checkpoint(tmp_path):
    rank0, rank1 = Workers(0, 2, torch.device("cpu")), Workers(1, 2, torch.device("cpu"))
    torch.manual_seed(0)
    random.seed(0)
    dropout_draws()  # the steps before the checkpoint
    save_random_state(str(tmp_path), rank0)
    uninterrupted = dropout_draws()
    torch.manual_seed(1)  # another rank's stream in the same folder must not interfere
    save_random_state(str(tmp_path), rank1)

    torch.manual_seed(0)  # a continued trial starts seeded, as every run does
    random.seed(0)
    restore_random_state(str(tmp_path), rank0)
    assert dropout_draws() == uninterrupted


def test_a_checkpoint_without_random_state_keeps_the_seeded_streams(tmp_path):
    torch.manual_seed(0)
    random.seed(0)
    seeded = dropout_draws()
    torch.manual_seed(0)
    random.seed(0)
    restore_random_state(str(tmp_path), Workers(0, 1, torch.device("cpu")))  # written by an older sweeper
    assert dropout_draws() == seeded
