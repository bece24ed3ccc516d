"""The benchmark commands (benchmarks/README.md) keep running and print their figures:
each on its smallest configuration here, once; the figures that matter come from the full
runs. The benchmarks that leave Ray up between their sweeps run one after the other in
one process (`run_benchmarks`): one set of imports and one local cluster for them all."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

# The first test's setup runs all nine benchmarks: a hang bound for the whole run, not the
# 600 s of one integration test.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


def together(folder) -> list[tuple[str, list[str]]]:
    """The benchmarks `run_benchmarks` runs in one process, each at its smallest size."""
    return [
        # No Ray: first.
        ("generation", ["--repeats", "1", "--steps", "10"]),
        ("readonly", ["--trials", "12", "--repeats", "1", "--keep", str(folder / "readonly-sweep")]),
        ("pruning", ["--trials", "3", "--max-steps", "18", "--grace-period", "2"]),
        # The second cold sweep would run the earlier sweep's code again.
        ("warm_start", ["--trials", "1", "--max-steps", "6", "--eval-every", "3", "--no-cold"]),
        ("confirm_winner", ["--seeds", "0", "--trials", "2", "--top", "2", "--confirm-seeds", "2",
                            "--max-steps", "6", "--eval-every", "3"]),
        # No confirmation here (its reruns double the sweeps' time): confirm_winner above
        # and tests/integration/test_confirm.py run search.confirm.
        ("selection", ["--seeds", "0", "--trials", "2", "--max-steps", "8", "--eval-every", "4",
                       "--confirm-top", "0", "--samples", "8", "--test-examples", "8", "--base-steps", "10",
                       "--train-examples", "64", "--results", str(folder / "selection-runs")]),
        ("search_quality", ["--seeds", "0", "--trials", "3", "--max-steps", "9", "--eval-every", "3",
                            "--methods", "random,optuna,asha_budget50", "--loop-share", "0.5",
                            "--base-steps", "10", "--train-examples", "64",
                            "--results", str(folder / "search-quality-runs"),
                            "--plot", str(folder / "anytime.html")]),
        # Each ends with Ray shut down (its plain runs get the machine without it): last.
        ("throughput", ["--steps", "10", "--eval-every", "5", "--rounds", "1"]),
        # Its plain run before its own cluster starts, as on its own.
        ("overhead", ["--trials", "2", "--steps", "10", "--eval-every", "5"]),
    ]


@pytest.fixture(scope="module")
def benchmarks_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("benchmarks")
    result = subprocess.run(
        [sys.executable, "-m", "tests.integration.run_benchmarks", str(folder), json.dumps(together(folder))],
        cwd=REPO, capture_output=True, text=True, timeout=1400,
    )
    return folder, result


def figures_of(benchmarks_run, name: str) -> dict:
    """The figures `name` wrote in the shared run, after checking it ran through and
    printed its table with the machine line."""
    folder, result = benchmarks_run
    error = folder / f"{name}.error"
    assert not error.exists(), error.read_text() + result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "machine:" in (folder / f"{name}.out").read_text()
    return json.loads((folder / f"{name}.json").read_text())


def test_overhead_benchmark_reports_setup_and_its_phases(benchmarks_run):
    figures = figures_of(benchmarks_run, "overhead")
    assert figures["completed"] == 2 and figures["steps_trained"] == 20
    phases = figures["setup_phases_median_s"]
    # One-worker trials in one reused process (2 trials, 2 slots: one each, or both in one).
    assert "worker_process_started" not in phases
    assert 0 < phases["train_loop_entered"] <= phases["data_and_task_ready"]
    assert figures["setup_first_in_process_median_s"] > 0
    assert phases["data_and_task_ready"] <= figures["setup_median_s"]
    assert figures["wall_s"] > figures["minimum_s"] > 0


def test_generation_benchmark_times_the_trial_with_and_without_generation(benchmarks_run):
    figures = figures_of(benchmarks_run, "generation")
    assert all(len(figures["cpu_seconds"][name]) == 1 for name in ("none", "end", "every_eval"))
    assert set(figures) >= {"added_cpu_share_end", "added_wall_share_end", "added_cpu_share_every_eval"}


def test_pruning_benchmark_counts_steps_against_the_rung_arithmetic(benchmarks_run):
    figures = figures_of(benchmarks_run, "pruning")
    # rungs at 2 and 6 with eta 3: 3 trials to step 2, max(1, floor(3/3)) = 1 on to 6,
    # max(1, floor(1/3)) = 1 on to 18: 3 x 2 + 1 x 4 + 1 x 12
    assert figures["rung_arithmetic"] == 22
    # ASHA by promotion: 1 of the 3 trials ranked at step 2 goes on, alone at step 6 it
    # goes on too (a closed rung lets one through); the other two stop at step 2.
    assert (figures["trials"], figures["completed"], figures["pruned"]) == (3, 1, 2)
    assert figures["pruned_at_steps"] == [2, 2]
    assert figures["steps_trained"] == 2 + 2 + 18


def test_throughput_benchmark_compares_a_trial_with_the_plain_loop(benchmarks_run):
    figures = figures_of(benchmarks_run, "throughput")
    (round_,) = figures["rounds"]
    assert round_["trial_tokens_per_s"] > 0 and round_["plain_tokens_per_s"] > 0
    # The thread's CPU time never exceeds its wall time.
    assert 0 < round_["trial_cpu_share"] <= 1.01 and 0 < round_["plain_cpu_share"] <= 1.01
    assert figures["ratio_median"] == pytest.approx(round_["trial_tokens_per_s"] / round_["plain_tokens_per_s"])


def test_readonly_benchmark_times_the_commands_on_a_written_sweep(benchmarks_run):
    figures = figures_of(benchmarks_run, "readonly")
    assert set(figures) >= {"list", "status", "report"}
    assert all(len(figures[name]["runs_s"]) == 1 for name in ("list", "status", "report"))
    # The sweep is as ASHA by promotion leaves 12 trials (the default: one rung at 10 of 90, 3 go on).
    from sweeper.track._store import SweepStore

    trials = SweepStore(f"sqlite:///{benchmarks_run[0] / 'readonly-sweep' / 'mlflow.db'}").trials("readonly")
    assert trials.height == 12
    assert sorted(trials["steps"].drop_nulls().to_list())[-1] == 90
    assert set(trials["state"]) == {"completed", "pruned", "failed"}


def test_search_quality_benchmark_compares_methods_on_steps_and_best_loss(benchmarks_run):
    figures = figures_of(benchmarks_run, "search_quality")
    methods = figures["methods"]
    # The two loops run in this process and one sweep, the default under a cap: the other
    # sweep methods differ from it only in the sections they start it with (the default's
    # step arithmetic is the pruning benchmark's test).
    assert set(methods) == {"random", "optuna", "asha_budget50"}
    assert methods["random"]["steps"] == [3 * 9]  # every trial to max_steps
    # No trial count, a budget.max_steps cap of half random search's 27 steps (14): no
    # trial starts, or goes on from the rung, past it.
    assert methods["asha_budget50"]["steps"][0] <= 14
    assert all(0 < best < 20 for runs in methods.values() for best in runs["best"])
    # The anytime figures: each method's best so far at 0.1x, 0.25x, 0.5x and 1x of random's steps,
    # never worse at a larger share.
    for method, shares in figures["anytime"].items():
        assert list(shares) == ["0.1", "0.25", "0.5", "1.0"], method
        assert shares["1.0"][0] <= shares["0.5"][0] <= shares["0.25"][0] <= shares["0.1"][0]
    assert figures["headroom"]["0"]["gap"] >= 0
    assert "plotly" in (benchmarks_run[0] / "anytime.html").read_text()


def test_warm_start_benchmark_counts_trials_to_the_earlier_best(benchmarks_run):
    figures = figures_of(benchmarks_run, "warm_start")
    assert figures["first_reaching"]["earlier"] is not None  # its own best
    results = {r["name"]: r for r in figures["results"]}
    # The earlier best config runs first and trains to max_steps, whatever its early
    # evaluations (a rerun need not match the earlier loss exactly: see README); only it
    # is marked warm-started.
    first = results["warm"]["trials"][0]
    assert (first["number"], first["state"], first["steps"]) == (1, "completed", 6)
    assert list(results["warm"]["warm_marks"]) == ["1"]  # trial numbers as JSON keys
    assert results["warm_history"]["warm_marks"] == {} and results["earlier"]["warm_marks"] == {}
    assert set(results) == {"earlier", "warm", "warm_history"}  # --no-cold


def test_confirm_winner_benchmark_says_whether_confirmation_changed_the_winner(benchmarks_run):
    figures = figures_of(benchmarks_run, "confirm_winner")
    (result,) = figures["results"]
    assert figures["sweeps"] == 1 and figures["changed"] == int(result["changed"])
    assert len(result["rows"]) == 2 and all(len(row["values"]) == 2 for row in result["rows"])
    means = {row["trial"]: row["mean"] for row in result["rows"]}
    assert result["winner"] == min(means, key=means.get)  # eval_loss: the lowest mean
    assert result["changed"] == (result["winner"] != result["search_best"])


def test_selection_benchmark_compares_the_winners_by_eval_loss_and_by_exact_match(benchmarks_run):
    figures = figures_of(benchmarks_run, "selection")
    (by_loss,), (by_em,) = figures["arms"]["eval_loss"], figures["arms"]["gen_exact_match"]
    for result, key, pick in ((by_loss, "eval_loss", min), (by_em, "em", max)):
        # Each winner is the best of its sweep's finalists (the trials at max_steps, which
        # generated) by the metric it selects by.
        winner = next(f for f in result["finalists"] if f["trial"] == result["winner"])
        assert winner[key] == pick(f[key] for f in result["finalists"])
        assert (winner["eval_loss"], winner["em"]) == (result["winner_eval_loss"], result["winner_em"])
        assert all(0 <= f["em"] <= 1 for f in result["finalists"]) and 0 <= result["winner_em_test"] <= 1
        assert "confirm" not in result
    # Same trials, rungs and steps: ASHA by promotion trains 2 x 4 + 4 steps in both.
    assert by_loss["steps"] == by_em["steps"] == 12
    assert set(figures["paired"]) == {"on the sample", "held out"}
    paired = figures["paired"]["held out"]
    assert paired["mean"] == pytest.approx(by_em["winner_em_test"] - by_loss["winner_em_test"])
    assert paired["verdict"] == "one seed: no interval"
