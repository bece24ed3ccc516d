"""Benchmark 3, pruning accounting: an ASHA sweep of N trials through
`sweeper.launch.run_sweep`; steps trained in total against the rung arithmetic for the
same N, grace period, reduction factor and max steps (N / eta^k trials reach rung k).

    flock /tmp/sweeper-ray.lock python -m benchmarks.pruning --trials 9
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from benchmarks.common import bench_spec, print_figures, save_json
from sweeper.plan import asha_rungs


def rung_arithmetic(trials: int, grace_period: int, reduction_factor: float, max_steps: int) -> float:
    """Steps that successive halving trains: N trials to the first rung, N/eta of them on
    to the next, ..., N/eta^k of them to max_steps."""
    milestones = [0, *asha_rungs(grace_period, max_steps, reduction_factor), max_steps]
    return sum(
        trials / reduction_factor**k * (milestones[k + 1] - milestones[k]) for k in range(len(milestones) - 1)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=9, help="N: trials in the sweep")
    parser.add_argument("--max-steps", type=int, default=90, help="R: steps of a trial that is never stopped")
    parser.add_argument("--grace-period", type=int, default=10)
    parser.add_argument("--reduction-factor", type=float, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    from sweeper.launch import run_sweep

    spec = bench_spec(
        "bench-pruning",
        training={"max_steps": args.max_steps, "eval_every": args.grace_period},
        search={"num_trials": args.trials},
        early_stopping={
            "scheduler": "asha",
            "grace_period": args.grace_period,
            "reduction_factor": args.reduction_factor,
        },
    )
    run = run_sweep(spec, console=Console(quiet=True))
    trials = list(run.book.trials.values())
    trained = sum(t.step for t in trials)
    arithmetic = rung_arithmetic(args.trials, args.grace_period, args.reduction_factor, args.max_steps)
    stopped_at = sorted(t.step for t in trials if t.status == "pruned")
    figures = {
        "trials": len(trials),
        "completed": run.book.count("completed"),
        "pruned": run.book.count("pruned"),
        "failed": run.book.count("failed"),
        "pruned_at_steps": stopped_at,
        "steps_trained": trained,
        "rung_arithmetic": arithmetic,
        "ratio": trained / arithmetic,
        "wall_s": run.wall_seconds,
    }
    rungs = asha_rungs(args.grace_period, args.max_steps, args.reduction_factor)
    print_figures(
        f"pruning: ASHA, {args.trials} trials, rungs {rungs}, max {args.max_steps} steps, "
        f"eta {args.reduction_factor:g}, {run.plan.concurrent_trials} at a time",
        [
            ("trials completed / pruned / failed", f"{figures['completed']} / {figures['pruned']} / {figures['failed']}", ""),
            ("pruned at steps", " ".join(map(str, stopped_at)) or "-", "last step each pruned trial reported"),
            ("steps trained", f"{trained}", "sum of the steps each trial reached"),
            ("rung arithmetic", f"{arithmetic:.0f}", "sum over rungs of N/eta^k x steps to the next rung"),
            ("ratio", f"{figures['ratio']:.2f}x", "target <= 1.3x"),
            ("sweep wall", f"{run.wall_seconds:.0f} s", ""),
        ],
    )
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
