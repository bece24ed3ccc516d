"""The live forecast of a real sweep: the ETA line in the driver's output and the estimate
on the parent run at every evaluation, ending near the actual cost; what the sweep measured
kept for the next forecast on this machine."""

import json
import re

import pytest
from mlflow.tracking import MlflowClient

from sweeper.plan.machine_profile import PROFILES_ENV
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


def test_the_next_forecast_on_this_machine_applies_what_the_sweep_measured(finished_sweep):
    assert finished_sweep.result.returncode == 0, finished_sweep.result.stderr
    # The first sweep on the machine said its overheads were modelled constants.
    assert "modelled (no sweep of this shape has ended on this machine yet)" in finished_sweep.result.stdout
    # It ran two trials at once: the empty trials before it measured one alone.
    (first,) = [line for line in finished_sweep.result.stdout.splitlines() if line.startswith("Measured:")]
    assert re.search(r"a trial alone in x(0\.\d\d|1\.00) of its time beside others", first), first
    machines = finished_sweep.workdir / "machines"
    (kept,) = machines.glob("*.json")
    (measure,) = json.loads(kept.read_text())["sweeps"]
    assert measure["sweep"] == "shared"
    # 5 trials of 30 steps: every figure measured, each a time or a ratio of times.
    for figure in ("step_ratio", "eval_ratio", "ray_start_seconds", "stop_seconds", "turnaround_seconds", "wall_ratio"):
        assert measure[figure] is not None and 0 < measure[figure] < 60, (figure, measure)

    planned = run_cli("plan", str(finished_sweep.yaml), cwd=finished_sweep.workdir, timeout=300,
                      env={PROFILES_ENV: str(machines)})
    assert planned.returncode == 0, planned.stderr
    (line,) = [line for line in planned.stdout.splitlines() if line.startswith("Measured:")]
    assert "on this machine's last 1 sweep of this shape (median)" in line, line
    assert f"Ray's part of a trial start ({measure['ray_start_seconds']:.1f} s)" in line, line
    assert f"steps in a sweep x{measure['step_ratio']:.2f}" in line, line


def test_the_first_plan_on_a_machine_measures_rays_part_with_empty_trials(tmp_path):
    """`sweep plan` where no sweep of the shape has ended on the machine: Ray's part of a
    trial is measured on a local cluster started for it (and stopped), as `sweep start`
    measures it, not taken from constants; nothing of a sweep is written."""
    yaml = write_yaml(tmp_path / "planned.yaml", small_sweep("planned", search={"num_trials": 5}))
    planned = run_cli("plan", str(yaml), cwd=tmp_path, timeout=300, env={PROFILES_ENV: str(tmp_path / "machines")})
    assert planned.returncode == 0, planned.stderr
    (line,) = [line for line in planned.stdout.splitlines() if line.startswith("Measured:")]
    assert re.search(
        r"Ray's part of a trial start \(\d+\.\d s\), the first wave's cold start \(\d+\.\d s\), .*"
        r"a trial alone in x(0\.\d\d|1\.00) of its time beside others, with \d+ empty trials on the cluster in", line
    ), line
    assert "modelled (no sweep of this shape has ended on this machine yet)" in line, line
    assert "nothing was started" in planned.stdout
    assert "save not implemented" not in planned.stderr  # Tune's warning for a searcher it cannot save
    assert sorted(path.name for path in tmp_path.iterdir()) == ["planned.yaml"]
