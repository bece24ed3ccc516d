"""A sweep warm-started from the shared finished sweep (ASHA by promotion, the default):
the earlier best config runs first, is not pruned on an early evaluation but trains to
max_steps, and the report marks it as warm-started."""

from __future__ import annotations

from mlflow.tracking import MlflowClient
import pytest

import sweeper
from tests.conftest import small_sweep, write_yaml
from tests.integration.conftest import run_cli

pytestmark = pytest.mark.integration


def test_the_earlier_best_runs_first_to_the_end_and_the_report_marks_it(finished_sweep, tmp_path):
    assert finished_sweep.result.returncode == 0, finished_sweep.result.stderr
    earlier = MlflowClient(finished_sweep.tracking_uri)
    experiment = earlier.get_experiment_by_name("sweeper")
    completed = earlier.search_runs(
        [experiment.experiment_id], "tags.`sweeper.state` = 'completed'", order_by=["metrics.eval_loss ASC"]
    )
    best = completed[0]
    raw = small_sweep("warm", output_dir=str(tmp_path / "sweeps" / "warm"), search={
        "num_trials": 3, "seed": 3,
        "warm_start": {"sweep": "shared", "top_k": 1, "sweep_dir": str(finished_sweep.workdir / "sweeps" / "shared")},
    })
    result = run_cli("start", str(write_yaml(tmp_path / "warm.yaml", raw)), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = sweeper.status("warm", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").sort("trial_number")
    first = trials.row(0, named=True)
    assert first["trial_number"] == 1 and first["state"] == "completed" and first["steps"] == 30
    assert first["warm_start"] == f"shared/{best.data.tags['sweeper.trial_id']}"
    assert first["training.learning_rate"] == pytest.approx(float(best.data.params["training.learning_rate"]))
    # The same config, seed and data order end where the earlier run ended, although that
    # run was paused at a rung and continued: its checkpoint carried dropout's random state.
    assert first["metric"] == pytest.approx(best.data.metrics["eval_loss"], rel=1e-5)
    board = sweeper.report("warm", out=tmp_path / "report", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").leaderboard
    marked = {row["trial"]: row["warm start from"] for row in board.iter_rows(named=True) if row["warm start from"]}
    assert marked == {1: first["warm_start"]}
    assert "warm start from" in (tmp_path / "report" / "report.md").read_text()
