"""A capped sweep on a real local Ray cluster: it stops at its cap, overshooting it by at
most one evaluation interval of the trials running when the cap is hit, and says so in
the summary and on the parent run."""

import mlflow
import pytest

from tests.conftest import small_sweep, write_yaml
from tests.integration.conftest import run_cli as sweep

pytestmark = pytest.mark.integration

# $1 per core-second, so that a cap of a few dollars is hit a few seconds in.
USD_PER_HOUR = 3600.0
CAP = 16.0


def test_a_capped_sweep_stops_within_one_evaluation_interval_of_its_cap(tmp_path):
    raw = small_sweep(
        "capped",
        # Evaluation intervals of 2-4 s (40 steps of a 32-example batch), longer than the
        # time Ray takes to stop a trial (up to 1.7 s on the busy 2-core machine).
        data={"max_length": 128},
        training={"max_steps": 120, "eval_every": 40, "per_device_batch_size": 32},
        search={"num_trials": 6, "seed": 1},
        early_stopping={"grace_period": 40, "reduction_factor": 3},
        cost={"usd_per_hour": USD_PER_HOUR},
        # Hit after the first two trials' first rung (about 6 s each).
        budget={"max_usd": CAP},
    )
    path = write_yaml(tmp_path / "capped.yaml", raw)
    result = sweep("start", str(path), cwd=tmp_path, timeout=600)
    out = result.stdout
    assert result.returncode in (0, 1), out + result.stderr  # 1: no trial completed before the cap
    assert f"Budget max_usd: {CAP:g} USD against" in out
    assert f"Budget: budget.max_usd ({CAP:g} USD) reached" in out, out

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sweeper")
    parent = client.search_runs([experiment.experiment_id], "tags.`sweeper.kind` = 'sweep'")[0]
    tags, metrics = parent.data.tags, parent.data.metrics
    assert tags["sweeper.budget_stop"] == "max_usd"
    assert tags["sweeper.status"] != "stopped"  # a cap is not an interruption
    running_at_cap = metrics["budget_trials_stopped"]
    assert running_at_cap >= 1
    intervals = evaluation_intervals(client, experiment.experiment_id, parent.info.run_id)
    assert intervals, "no trial reported before the cap: raise CAP"
    one_interval_usd = running_at_cap * max(intervals) / 3600 * USD_PER_HOUR
    assert CAP <= metrics["cost_usd_total"] <= CAP + one_interval_usd, (metrics["cost_usd_total"], one_interval_usd)
    assert metrics["trials_total"] + metrics["budget_trials_not_started"] == 6


def evaluation_intervals(client, experiment_id: str, parent_run_id: str) -> list[float]:
    """Each trial's first evaluation interval as it ran (its steps slow down when trials
    share the cores): from its first optimizer step (run start + setup) to its first report."""
    children = client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{parent_run_id}'")
    intervals = []
    for child in children:
        reports = client.get_metric_history(child.info.run_id, "eval_loss")
        setup = child.data.metrics.get("setup_seconds")
        if reports and setup is not None:
            intervals.append(min(r.timestamp for r in reports) / 1000 - child.info.start_time / 1000 - setup)
    return intervals
