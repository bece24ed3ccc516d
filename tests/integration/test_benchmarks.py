"""The benchmark commands (benchmarks/README.md) keep running and print their figures:
each on a tiny configuration here; the figures that matter come from the full runs."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def run_benchmark(name: str, tmp_path, *args) -> dict:
    out = tmp_path / f"{name}.json"
    result = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args, "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "machine:" in result.stdout
    return json.loads(out.read_text())


def test_overhead_benchmark_reports_setup_and_its_phases(tmp_path):
    figures = run_benchmark("overhead", tmp_path, "--trials", "4", "--steps", "20")
    assert figures["completed"] == 4 and figures["steps_trained"] == 80
    phases = figures["setup_phases_median_s"]
    assert 0 < phases["worker_process_started"] <= phases["train_loop_entered"] <= phases["data_and_task_ready"]
    assert phases["data_and_task_ready"] <= figures["setup_median_s"]
    # The later trials' Train workers are forked from the warm server, which listens
    # some seconds after Ray starts.
    assert figures["warm_started_workers"] >= 1
    assert figures["wall_s"] > figures["minimum_s"] > 0


def test_pruning_benchmark_counts_steps_against_the_rung_arithmetic(tmp_path):
    figures = run_benchmark("pruning", tmp_path, "--trials", "3", "--max-steps", "18", "--grace-period", "2")
    # rungs at 2 and 6 with eta 3: 3 x 2 + 1 x 4 + 1/3 x 12
    assert figures["rung_arithmetic"] == pytest.approx(14)
    # ASHA by promotion: 1 of the 3 trials ranked at step 2 goes on, alone at step 6 it
    # goes on too (a closed rung lets one through); the other two stop at step 2.
    assert (figures["trials"], figures["completed"], figures["pruned"]) == (3, 1, 2)
    assert figures["pruned_at_steps"] == [2, 2]
    assert figures["steps_trained"] == 2 + 2 + 18


def test_throughput_benchmark_compares_a_trial_with_the_plain_loop(tmp_path):
    figures = run_benchmark("throughput", tmp_path, "--steps", "20", "--rounds", "1")
    (round_,) = figures["rounds"]
    assert round_["trial_tokens_per_s"] > 0 and round_["plain_tokens_per_s"] > 0
    # The thread's CPU time never exceeds its wall time.
    assert 0 < round_["trial_cpu_share"] <= 1.01 and 0 < round_["plain_cpu_share"] <= 1.01
    assert figures["ratio_median"] == pytest.approx(round_["trial_tokens_per_s"] / round_["plain_tokens_per_s"])
