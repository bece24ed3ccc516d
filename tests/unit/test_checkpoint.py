"""A checkpoint carries the report it was taken with, so that a run restarted at its last
step (its driver died before recording that report) can report it again."""

import json

from trainables.common import REPORT_FILE, final_report_of


def test_the_final_report_comes_back_only_for_a_run_at_its_end(tmp_path):
    assert final_report_of(str(tmp_path), max_steps=30) is None  # a checkpoint from before
    (tmp_path / REPORT_FILE).write_text(json.dumps({"step": 20, "eval_loss": 4.0}))
    assert final_report_of(str(tmp_path), max_steps=30) is None  # training goes on
    (tmp_path / REPORT_FILE).write_text(json.dumps({"step": 30, "eval_loss": 3.9}))
    assert final_report_of(str(tmp_path), max_steps=30) == {"step": 30, "eval_loss": 3.9}
