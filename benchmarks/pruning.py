"""Benchmark 3, pruning accounting: an ASHA sweep of N trials through
`sweeper.run._launch.run_sweep`; steps trained in total against the rung arithmetic for the
same N, grace period, reduction factor and max steps (`sweeper.plan._sweep_plan.promotion_steps`:
floor(n / eta), at least 1, of the n trials at a rung go on).

A trial that is paused at a rung or stopped trains on until its Train workers are gone;
those steps reach no report and are thrown away (a paused trial continues from its
checkpoint at the rung). They are bounded by the stop lag: from the deciding result's
arrival on the driver to the next trial starting on the same trial actor (which happens
only after the stopped run was aborted), over the step time.

    python -m benchmarks.pruning --trials 9                          # ASHA by promotion
    python -m benchmarks.pruning --trials 9 --scheduler asha_stopping  # Ray's ASHA
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path

from ray.tune import Callback

from benchmarks.common import bench_spec, print_figures, run_bench_sweep, save_json
from sweeper.names import TrialState
from sweeper.plan import asha_rungs, promotion_steps
from trainables.metrics import STEP


class ResultClock(Callback):
    """Driver-side arrival time, step and trial-actor pid of every result, and every
    start of a trial (a trial paused at a rung starts again when promoted)."""

    def __init__(self):
        self.results: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
        self.starts: list[tuple[float, str]] = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.starts.append((time.time(), trial.trial_id))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results[trial.trial_id].append((time.time(), result.get(STEP), result.get("pid")))

    def segments(self) -> list[tuple[str, list[tuple[float, int, int]]]]:
        """(trial, its results) for each run of a trial from one start to the next."""
        starts = sorted(self.starts)
        found = []
        for index, (started, trial_id) in enumerate(starts):
            later = [t for t, other in starts[index + 1 :] if other == trial_id]
            until = later[0] if later else float("inf")
            results = [r for r in self.results[trial_id] if started <= r[0] < until]
            if results:
                found.append((trial_id, results))
        return found


def stop_lags(clock: ResultClock, max_steps: int) -> list[float]:
    """For each segment that ended before max_steps (paused or pruned): seconds from its
    last result to the next trial starting on the same trial actor (which happens only
    after the stopped Train run was aborted). Segments whose actor ran nothing after them
    are left out."""
    starts_by_actor = defaultdict(list)
    for started, trial_id in clock.starts:
        first = next((r for r in clock.results[trial_id] if r[0] > started), None)
        if first is not None:
            starts_by_actor[first[2]].append(started)
    lags = []
    for _, results in clock.segments():
        arrived, step, pid = results[-1]
        later = [started for started in starts_by_actor[pid] if started > arrived]
        if step < max_steps and later:
            lags.append(min(later) - arrived)
    return lags


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=9, help="N: trials in the sweep")
    parser.add_argument("--max-steps", type=int, default=90, help="R: steps of a trial that is never stopped")
    parser.add_argument("--grace-period", type=int, default=10)
    parser.add_argument("--reduction-factor", type=float, default=3)
    parser.add_argument(
        "--method", default="tpe", choices=["tpe", "random"],
        help="search.method: with tpe later trials tend to be better, so ASHA promotes more of them",
    )
    parser.add_argument(
        "--scheduler", default="asha", choices=["asha", "asha_stopping"],
        help="early_stopping.scheduler: asha pauses trials at rungs until they rank in the best 1/eta; "
        "asha_stopping (Ray's) decides when a trial arrives",
    )
    parser.add_argument("--seed", type=int, default=0, help="search.seed: compare schedulers over several")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    spec = bench_spec(
        "bench-pruning",
        training={"max_steps": args.max_steps, "eval_every": args.grace_period},
        search={"num_trials": args.trials, "method": args.method, "seed": args.seed},
        early_stopping={
            "scheduler": args.scheduler,
            "grace_period": args.grace_period,
            "reduction_factor": args.reduction_factor,
            # every rung below max_steps, as promotion_steps counts them (the default ranks at one)
            **({"rungs": "all"} if args.scheduler == "asha" else {}),
        },
    )
    clock = ResultClock()
    run = run_bench_sweep(spec, extra_callbacks=[clock])
    trials = list(run.book.trials.values())
    trained = sum(t.step for t in trials)
    lags = stop_lags(clock, args.max_steps)
    stopped_segments = sum(1 for _, results in clock.segments() if results[-1][1] < args.max_steps)
    # steps a stopped segment may have trained after its last report: lag / step time
    step_seconds = statistics.median(
        t.history[0]["train_tokens"] / t.history[0]["tokens_per_second"] / args.grace_period for t in trials if t.history
    )
    unreported = [lag / step_seconds for lag in lags]
    bound = trained + (statistics.mean(unreported) * stopped_segments if unreported else 0.0)
    arithmetic = promotion_steps(args.trials, args.grace_period, args.max_steps, args.reduction_factor)
    stopped_at = sorted(t.step for t in trials if t.state == TrialState.PRUNED)
    best = run.book.best()
    figures = {
        "scheduler": args.scheduler,
        "method": args.method,
        "seed": args.seed,
        "trials": len(trials),
        "completed": run.book.count(TrialState.COMPLETED),
        "pruned": run.book.count(TrialState.PRUNED),
        "failed": run.book.count(TrialState.FAILED),
        "pruned_at_steps": stopped_at,
        "pauses": sum(t.pauses for t in trials),
        "resumed_segments": len(clock.starts) - len(trials),
        "steps_trained": trained,
        "rung_arithmetic": arithmetic,
        "ratio": trained / arithmetic,
        "stop_lag_median_s": statistics.median(lags) if lags else None,
        "stop_lags_measured": len(lags),
        "stopped_segments": stopped_segments,
        "unreported_steps_median": statistics.median(unreported) if unreported else None,
        "steps_trained_bound": bound if unreported else None,
        "ratio_bound": bound / arithmetic if unreported else None,
        "wall_s": run.wall_seconds,
        # what the sweep found: fewer steps must not mean a worse search
        "best_metric": best.last(spec.search.metric) if best else None,
        "best_trial": best.number if best else None,
        # CPU core-seconds of all trials, setups of resumed runs included (sweeper.cost._prices)
        "trial_core_seconds": run.cost.accelerator_hours * 3600,
    }
    rungs = asha_rungs(args.grace_period, args.max_steps, args.reduction_factor)
    print_figures(
        f"pruning: {args.scheduler}, {args.trials} trials ({args.method}), rungs {rungs}, max {args.max_steps} "
        f"steps, eta {args.reduction_factor:g}, {run.plan.concurrent_trials} at a time",
        [
            ("trials completed / pruned / failed", f"{figures['completed']} / {figures['pruned']} / {figures['failed']}", ""),
            ("pruned at steps", " ".join(map(str, stopped_at)) or "-", "last step each pruned trial reported"),
            (
                "pauses / resumed runs",
                f"{figures['pauses']} / {figures['resumed_segments']}",
                "trials paused at a rung / continued later from their checkpoint (a new Train run each)",
            ),
            ("steps trained", f"{trained}", "sum of the steps each trial reached"),
            ("rung arithmetic", f"{arithmetic:.0f}", "per milestone: trials reaching it x steps from the one before"),
            ("ratio", f"{figures['ratio']:.2f}x", "target <= 1.3x"),
            (
                "stop lag, median",
                f"{figures['stop_lag_median_s']:.2f} s" if lags else "n/a",
                f"pausing or stopping result -> next trial on its actor ({len(lags)} of {stopped_segments} runs)",
            ),
            (
                "unreported steps per stopped run",
                f"<= {figures['unreported_steps_median']:.0f}" if unreported else "n/a",
                "median of stop lag / step time: trained after the decision, then thrown away",
            ),
            (
                "ratio incl. unreported steps",
                f"<= {figures['ratio_bound']:.2f}x" if unreported else "n/a",
                "steps trained plus the mean bound for every stopped run",
            ),
            (
                f"best {spec.search.metric}",
                f"{figures['best_metric']:.4f}" if best else "-",
                f"trial {figures['best_trial']}, among completed trials",
            ),
            (
                "trial core-seconds",
                f"{figures['trial_core_seconds']:.0f} s",
                "what the sweep's cost is computed from: trials' wall x cores, every setup included",
            ),
            ("sweep wall", f"{run.wall_seconds:.0f} s", ""),
        ],
    )
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
