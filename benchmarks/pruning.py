"""Benchmark 3, pruning accounting: an ASHA sweep of N trials through
`sweeper.launch.run_sweep`; steps trained in total against the rung arithmetic for the
same N, grace period, reduction factor and max steps (N / eta^k trials reach rung k).

A stopped trial trains on until its Train workers are gone; those steps reach no report.
They are bounded by the stop lag: from the stopping result's arrival on the driver to the
next trial starting on the same trial actor (which happens only after the stopped run was
aborted), times the stopped trial's step rate.

    flock /tmp/sweeper-ray.lock python -m benchmarks.pruning --trials 9
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path

from ray.tune import Callback

from benchmarks.common import bench_spec, print_figures, run_bench_sweep, save_json
from sweeper.plan import asha_rungs


def rung_arithmetic(trials: int, grace_period: int, reduction_factor: float, max_steps: int) -> float:
    """Steps that successive halving trains: N trials to the first rung, N/eta of them on
    to the next, ..., N/eta^k of them to max_steps."""
    milestones = [0, *asha_rungs(grace_period, max_steps, reduction_factor), max_steps]
    return sum(
        trials / reduction_factor**k * (milestones[k + 1] - milestones[k]) for k in range(len(milestones) - 1)
    )


class ResultClock(Callback):
    """Driver-side arrival time, step and trial-actor pid of every result, and when each
    trial started."""

    def __init__(self):
        self.results: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
        self.started: dict[str, float] = {}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started[trial.trial_id] = time.time()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results[trial.trial_id].append((time.time(), result.get("step"), result.get("pid")))


def stop_lags(clock: ResultClock, stopped: list[str]) -> dict[str, float]:
    """Seconds from each stopped trial's last result to the next trial starting on its
    actor; trials whose actor ran no further trial are left out."""
    lags = {}
    for trial_id in stopped:
        arrived, _, pid = clock.results[trial_id][-1]
        later = [
            clock.started[other]
            for other, results in clock.results.items()
            if other != trial_id and results[0][2] == pid and clock.started[other] > arrived
        ]
        if later:
            lags[trial_id] = min(later) - arrived
    return lags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=9, help="N: trials in the sweep")
    parser.add_argument("--max-steps", type=int, default=90, help="R: steps of a trial that is never stopped")
    parser.add_argument("--grace-period", type=int, default=10)
    parser.add_argument("--reduction-factor", type=float, default=3)
    parser.add_argument(
        "--method", default="tpe", choices=["tpe", "random"],
        help="search.method: with tpe later trials tend to be better, so ASHA promotes more of them",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    spec = bench_spec(
        "bench-pruning",
        training={"max_steps": args.max_steps, "eval_every": args.grace_period},
        search={"num_trials": args.trials, "method": args.method},
        early_stopping={
            "scheduler": "asha",
            "grace_period": args.grace_period,
            "reduction_factor": args.reduction_factor,
        },
    )
    clock = ResultClock()
    run = run_bench_sweep(spec, extra_callbacks=[clock])
    trials = list(run.book.trials.values())
    trained = sum(t.step for t in trials)
    pruned = [t for t in trials if t.status == "pruned"]
    lags = stop_lags(clock, [t.trial_id for t in pruned])
    # steps a stopped trial may have trained after its last report: lag x its step rate
    unreported = {
        t.trial_id: lags[t.trial_id] / (t.history[0]["train_tokens"] / t.history[0]["tokens_per_second"] / args.grace_period)
        for t in pruned
        if t.trial_id in lags
    }
    bound = trained + sum(unreported.values()) * len(pruned) / max(1, len(unreported))
    arithmetic = rung_arithmetic(args.trials, args.grace_period, args.reduction_factor, args.max_steps)
    stopped_at = sorted(t.step for t in trials if t.status == "pruned")
    figures = {
        "method": args.method,
        "trials": len(trials),
        "completed": run.book.count("completed"),
        "pruned": run.book.count("pruned"),
        "failed": run.book.count("failed"),
        "pruned_at_steps": stopped_at,
        "steps_trained": trained,
        "rung_arithmetic": arithmetic,
        "ratio": trained / arithmetic,
        "stop_lag_median_s": statistics.median(lags.values()) if lags else None,
        "stop_lags_measured": len(lags),
        "unreported_steps_median": statistics.median(unreported.values()) if unreported else None,
        "steps_trained_bound": bound if unreported else None,
        "ratio_bound": bound / arithmetic if unreported else None,
        "wall_s": run.wall_seconds,
    }
    rungs = asha_rungs(args.grace_period, args.max_steps, args.reduction_factor)
    print_figures(
        f"pruning: ASHA, {args.trials} trials ({args.method}), rungs {rungs}, max {args.max_steps} steps, "
        f"eta {args.reduction_factor:g}, {run.plan.concurrent_trials} at a time",
        [
            ("trials completed / pruned / failed", f"{figures['completed']} / {figures['pruned']} / {figures['failed']}", ""),
            ("pruned at steps", " ".join(map(str, stopped_at)) or "-", "last step each pruned trial reported"),
            ("steps trained", f"{trained}", "sum of the steps each trial reached"),
            ("rung arithmetic", f"{arithmetic:.0f}", "sum over rungs of N/eta^k x steps to the next rung"),
            ("ratio", f"{figures['ratio']:.2f}x", "target <= 1.3x"),
            (
                "stop lag, median",
                f"{figures['stop_lag_median_s']:.2f} s" if lags else "n/a",
                f"stopping result -> next trial on its actor ({len(lags)} of {len(pruned)} pruned trials)",
            ),
            (
                "unreported steps per pruned trial",
                f"<= {figures['unreported_steps_median']:.0f}" if unreported else "n/a",
                "median of stop lag x the trial's step rate",
            ),
            (
                "ratio incl. unreported steps",
                f"<= {figures['ratio_bound']:.2f}x" if unreported else "n/a",
                "steps trained plus that bound for every pruned trial",
            ),
            ("sweep wall", f"{run.wall_seconds:.0f} s", ""),
        ],
    )
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
