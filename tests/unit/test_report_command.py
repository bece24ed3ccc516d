"""`sweep report` through the CLI on a store the real MLflow writer wrote (the tracker
driven by hand, no Ray): a sweep without a completed trial is reported and exits 2."""

import time

from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.spec._load import validate_spec
from sweeper.track._book import SweepBook, TrialRecord
from sweeper.track._tracker import MlflowTracker
from tests.conftest import markdown_table, small_sweep

runner = CliRunner()


def test_sweep_without_a_completed_trial_is_reported_and_exits_2(tmp_path, monkeypatch):
    """A sweep whose trials were all pruned or failed, written by the real MLflow writer."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = validate_spec(small_sweep("stalled", output_dir=str(tmp_path / "sweeps")), base_dir=tmp_path)
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    monkeypatch.chdir(tmp_path)  # the tracker puts a SQLite store's artifacts in ./mlartifacts
    tracker = MlflowTracker(spec, book, uri, hardware="test")
    tracker.start_sweep(tmp_path)
    now = time.time()
    for trial_id, number, status, history in (
        ("a", 1, "pruned", [{"step": 10, "eval_loss": 5.5, "setup_seconds": 1.0, "train_tokens": 100}]),
        ("b", 2, "failed", []),
    ):
        record = book.trials[trial_id] = TrialRecord(trial_id, number, {"training.learning_rate": 1e-3 * number}, started_at=now - 30)
        tracker.trial_started(record)
        for report in history:
            record.history.append(report)
            tracker.trial_result(record)
        record.state, record.ended_at = status, now
        record.error = "RuntimeError: boom" if status == "failed" else None
        tracker.trial_finished(record)
    tracker.finish_sweep()

    out = tmp_path / "report"
    result = runner.invoke(app, ["report", "stalled", "--tracking-uri", uri, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"error: NAME: sweep 'stalled' has no completed trial; the report in {out} shows what exists" in result.output
    text = (out / "report.md").read_text()
    assert "has no completed trial (1 pruned, 1 failed)" in text
    statuses = [row["status"] for row in markdown_table(text, "### Leaderboard")]
    assert statuses == ["pruned at step 10", "failed: RuntimeError: boom"]
    assert "No best config: no trial completed." in text
    assert (out / "index.html").is_file()
