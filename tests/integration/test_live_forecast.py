"""The live forecast of a real sweep: the ETA line in the driver's output and the estimate
on the parent run at every evaluation, ending near the actual cost; `sweep plan`
calibrating on a local cluster of its own."""

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import small_sweep, write_yaml
from tests.integration.conftest import run_cli
from tests.integration.test_tracking import runs_of

pytestmark = pytest.mark.integration


def test_the_sweep_shows_its_eta_and_logs_the_live_forecast_at_each_evaluation(finished_sweep):
    result = finished_sweep.result
    assert result.returncode == 0, result.stderr
    # The output is a pipe: the ETA line is printed with each finished trial.
    etas = [line for line in result.stdout.splitlines() if line.startswith("ETA ")]
    assert etas, result.stdout
    assert " to go of $" in etas[-1] and "steps measured" in etas[-1], etas[-1]

    client = MlflowClient(finished_sweep.tracking_uri)
    (parent,), children = runs_of(client, "shared")
    remaining = client.get_metric_history(parent.info.run_id, "forecast_remaining_s")
    total_usd = client.get_metric_history(parent.info.run_id, "forecast_total_usd")
    evaluations = sum(len(client.get_metric_history(c.info.run_id, "eval_loss")) for c in children)
    # Step 0: the calibrated forecast as the first trial starts; then one per evaluation.
    assert sorted(m.step for m in remaining) == list(range(evaluations + 1))
    assert remaining[0].value > 0
    last = max(total_usd, key=lambda m: m.step)
    actual = parent.data.metrics["cost_usd_total"]
    # At the last evaluation nothing but the last trial's end is left to spend.
    assert last.value == pytest.approx(actual, rel=0.2), (last.value, actual)
    assert max(remaining, key=lambda m: m.step).value < remaining[0].value


@pytest.mark.fresh_store
def test_sweep_plan_calibrates_on_a_local_cluster_of_its_own_and_writes_nothing(tmp_path):
    """`sweep plan` without --address starts a local cluster as `sweep start` does, measures
    the step and evaluation there in Ray tasks, stops it, and leaves no sweep behind."""
    yaml = write_yaml(tmp_path / "planned.yaml", small_sweep("planned", search={"num_trials": 5}))
    planned = run_cli("plan", str(yaml), cwd=tmp_path, timeout=300)
    assert planned.returncode == 0, planned.stderr
    (line,) = [line for line in planned.stdout.splitlines() if line.startswith("Step time:")]
    assert "in a Ray task with one worker's resources" in line, line
    assert "Calibration took" in planned.stdout and "nothing was started" in planned.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == ["planned.yaml"]
