"""Benchmark 7, warm start under ASHA: does a sweep warm-started from an earlier one reach
the earlier sweep's best eval loss in fewer trials than a cold sweep?

Four sweeps of the quickstart (its space, model and data; ASHA by promotion, the
default), all with the same search seed, one after the other in one Ray cluster:
- earlier: a cold sweep; its best eval loss is the target;
- cold: the same cold sweep again (a second cold run, to show what a cold start needs;
  trials finish in an order the machine decides, so TPE's later suggestions can differ);
- warm: `search.warm_start: {sweep: earlier, top_k: 1}`: the earlier trials seed TPE
  and the earlier best config runs first;
- warm_history: `top_k: 0`: the earlier trials only seed TPE.

Per sweep: the number of the first trial whose eval loss (its last, as the sweep ranks
trials) reaches the target, the best eval loss, the steps trained, the wall time, and
which trials the report (`sweeper.report`'s leaderboard) marks as warm-started.

    python -m benchmarks.warm_start                 # 10 trials, search seed 0
    python -m benchmarks.warm_start --trials 6 --seed 1 --json warm.json
    python -m benchmarks.warm_start --trials 1 --max-steps 18 --eval-every 6 --no-cold   # its test
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.common import bench_spec, print_figures, run_bench_sweep, save_json

# A trial "reaches" the target when its eval loss is this close to it or below: the same
# config retrains to the same losses, up to float summation order.
TOLERANCE = 1e-4


def run(name: str, root: Path, args, warm_start: dict | None = None) -> dict:
    search = {"num_trials": args.trials, "seed": args.seed}
    if warm_start is not None:
        search["warm_start"] = warm_start
    shorter = {}
    if args.max_steps:  # a shorter sweep (the benchmark's test): evaluations are ASHA's rungs
        shorter = {"training": {"max_steps": args.max_steps, "eval_every": args.eval_every},
                   "early_stopping": {"grace_period": args.eval_every}}
    (root / name).mkdir(parents=True)
    spec = bench_spec(name, root / name, search=search, **shorter)
    started = time.time()
    sweep = run_bench_sweep(spec)
    wall = time.time() - started
    records = sorted(sweep.book.trials.values(), key=lambda r: r.number)
    return {
        "name": name,
        "trials": [
            {"number": r.number, "loss": r.last("eval_loss"), "state": str(r.state), "steps": r.step,
             "pauses": r.pauses, "params": r.params}
            for r in records
        ],
        "steps": sum(r.step for r in records),
        "wall_seconds": wall,
        "warm_marks": _warm_marks(name, spec.tracking.uri, root / name / "report"),
    }


def _warm_marks(name: str, tracking_uri: str, out: Path) -> dict[int, str]:
    """Trial number -> 'warm start from' as the written report's leaderboard shows it."""
    import sweeper

    board = sweeper.report(name, out=out, tracking_uri=tracking_uri).leaderboard
    if "warm start from" not in board.columns:
        return {}
    return {row["trial"]: row["warm start from"] for row in board.iter_rows(named=True) if row["warm start from"]}


def first_reaching(result: dict, target: float) -> int | None:
    for trial in result["trials"]:
        if trial["state"] == "completed" and trial["loss"] <= target + TOLERANCE:
            return trial["number"]
    return None


def best(result: dict) -> float:
    return min(t["loss"] for t in result["trials"] if t["loss"] is not None and t["state"] == "completed")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, help="default: the quickstart's (90)")
    parser.add_argument("--eval-every", type=int, default=10, help="with --max-steps: also ASHA's grace period")
    parser.add_argument(
        "--no-cold", action="store_true",
        help="skip the second cold sweep (its test: the cold sweep runs the earlier sweep's code again)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="sweeper-bench-warm-"))
    earlier_dir = str(root / "earlier")
    earlier = run("earlier", root, args)
    target = best(earlier)
    results = [
        earlier,
        *([] if args.no_cold else [run("cold", root, args)]),
        run("warm", root, args, {"sweep": "earlier", "top_k": 1, "sweep_dir": earlier_dir}),
        run("warm_history", root, args, {"sweep": "earlier", "top_k": 0, "sweep_dir": earlier_dir}),
    ]
    rows = [("target: earlier sweep's best eval loss", f"{target:.4f}", f"{args.trials} trials, search seed {args.seed}, ASHA")]
    for result in results:
        reached = first_reaching(result, target)
        marks = ", ".join(f"#{n} <- {source}" for n, source in sorted(result["warm_marks"].items())) or "none"
        rows += [
            (f"{result['name']}: first trial reaching the target", str(reached) if reached else "not reached",
             f"of {len(result['trials'])}"),
            (f"{result['name']}: best eval loss", f"{best(result):.4f}", f"{result['steps']} steps, {result['wall_seconds']:.0f} s"),
            (f"{result['name']}: trials the report marks warm-started", str(len(result["warm_marks"])), marks),
        ]
    print_figures("Warm start under ASHA: trials to reach the earlier best", rows)
    figures = {"target": target, "first_reaching": {r["name"]: first_reaching(r, target) for r in results}, "results": results}
    save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
