"""`sweep report` through the CLI on a store the real MLflow writer wrote (the tracker
driven by hand, no Ray): a sweep without a completed trial is reported and exits 2; a
GRPO sweep's report ranks and draws by its eval_reward, maximized."""

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


def test_a_grpo_sweeps_report_ranks_and_draws_by_its_eval_reward_maximized(tmp_path, monkeypatch):
    """A GRPO sweep (search.metric eval_reward, goal maximize by default), written by the
    real MLflow writer: the report's headline, leaderboard, best trial and figures follow
    the sweep's metric and goal, the highest reward first; eval_loss is nowhere."""
    from reports.data import load_sweeps
    from reports.figures import best_curves_figure, curves_figure, progress_figure
    from sweeper.track._store import SweepStore
    from tests.unit.test_grpo_spec import grpo_sweep

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    raw = grpo_sweep(tmp_path)
    raw.update(name="rewarded", output_dir=str(tmp_path / "sweeps" / "rewarded"))
    spec = validate_spec(raw, base_dir=tmp_path)
    assert (spec.search.metric, spec.search.goal) == ("eval_reward", "maximize")
    book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=30)
    monkeypatch.chdir(tmp_path)  # the tracker puts a SQLite store's artifacts in ./mlartifacts
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chrome"))  # no PNGs: the figures are read below
    tracker = MlflowTracker(spec, book, uri, hardware="test")
    tracker.start_sweep(tmp_path)
    now = time.time()
    # trial number -> (state, its eval_reward at steps 10, 20, 30): trial 2 rewarded most.
    curves = {1: ("completed", [0.1, 0.2, 0.3]), 2: ("completed", [0.2, 0.5, 0.9]), 3: ("pruned", [0.05])}
    for number, (state, rewards) in curves.items():
        record = book.trials[f"t{number}"] = TrialRecord(f"t{number}", number, {"training.learning_rate": 1e-3 * number},
                                                         started_at=now - 30)
        tracker.trial_started(record)
        for index, reward in enumerate(rewards):
            record.history.append({"step": 10 * (index + 1), "eval_reward": reward, "eval_reward_correct": reward,
                                   "eval_loss": 0.01 * number, "setup_seconds": 1.0, "train_tokens": 100})
            tracker.trial_result(record)
        record.state, record.ended_at = state, now
        tracker.trial_finished(record)
    tracker.finish_sweep()

    out = tmp_path / "report"
    result = runner.invoke(app, ["report", "rewarded", "--tracking-uri", uri, "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    assert "metric eval_reward (maximize). Best: trial 2, eval_reward = 0.9" in text
    board = markdown_table(text, "### Leaderboard")
    assert [row["trial"] for row in board] == ["2", "1", "3"]
    assert [row["best eval_reward seen"] for row in board][:2] == ["0.9000", "0.3000"]
    assert "eval_loss" not in text

    (data,) = load_sweeps(SweepStore(uri), ["rewarded"])
    curve = curves_figure(data)
    assert curve.layout.yaxis.title.text == "eval_reward"
    best = next(trace for trace in curve.data if "(best)" in trace.name)
    assert best.name.startswith("trial 2") and list(best.y) == [0.2, 0.5, 0.9]
    assert list(best_curves_figure([data]).data[0].y) == [0.2, 0.5, 0.9]
    assert max(y for y in progress_figure([data]).data[0].y if y is not None) == 0.9
