"""How often confirmation changes the winner: the quickstart's sweep (its space, model and
data) with `search.confirm`, once per search seed. Per sweep: the search's single best
trial, the winner by mean over the new seeds, whether they differ, each confirmed
config's mean and 95% interval, and whether the search's best lies inside the winner's
interval (a change inside the seed noise).

    python -m benchmarks.confirm_winner                              # seeds 0 1 2, 6 trials, top 3 x 3 seeds
    python -m benchmarks.confirm_winner --seeds 0 1 --trials 4 --top 2 --confirm-seeds 2 --max-steps 30
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.common import bench_spec, print_figures, run_bench_sweep, save_json


def run(seed: int, root: Path, args) -> dict:
    name = f"confirm-seed{seed}"
    sections = {"search": {"num_trials": args.trials, "seed": seed,
                           "confirm": {"top": args.top, "seeds": args.confirm_seeds}}}
    if args.max_steps:
        sections["training"] = {"max_steps": args.max_steps, "eval_every": args.eval_every}
        sections["early_stopping"] = {"grace_period": args.eval_every}
    (root / name).mkdir(parents=True)
    spec = bench_spec(name, root / name, **sections)
    started = time.time()
    sweep = run_bench_sweep(spec)
    confirmation = sweep.book.confirmation
    rows = [{"trial": row.candidate.number, "search": row.candidate.value, "step": row.candidate.step,
             "values": row.values, "mean": row.mean, "low": row.low, "high": row.high} for row in confirmation.rows]
    winner = confirmation.winner
    return {
        "seed": seed,
        "search_best": confirmation.rows[0].candidate.number if confirmation.rows else None,
        "winner": winner.candidate.number if winner else None,
        "changed": confirmation.changed_winner,
        # The search's best config's mean inside the winner's interval: a change the seeds cannot tell apart.
        "inside_noise": bool(winner and confirmation.changed_winner and winner.low <= confirmation.rows[0].mean <= winner.high),
        "rows": rows,
        "wall_seconds": time.time() - started,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="search seeds, one sweep each")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--confirm-seeds", type=int, default=3)
    parser.add_argument("--max-steps", type=int, help="default: the quickstart's (90)")
    parser.add_argument("--eval-every", type=int, default=10, help="with --max-steps: also ASHA's grace period")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="sweeper-bench-confirm-"))
    results = [run(seed, root, args) for seed in args.seeds]
    rows = []
    for result in results:
        configs = "; ".join(
            f"#{r['trial']} search {r['search']:.4f} (step {r['step']}) mean {r['mean']:.4f} "
            f"[{r['low']:.4f}, {r['high']:.4f}]" for r in result["rows"] if r["mean"] is not None and r["low"] is not None)
        rows.append((f"search seed {result['seed']}: search best -> winner by mean",
                     f"#{result['search_best']} -> #{result['winner']}",
                     ("changed" + (" (inside the winner's interval)" if result["inside_noise"] else "") if result["changed"]
                      else "same") + f"; {configs}; {result['wall_seconds']:.0f} s"))
    changed = sum(r["changed"] for r in results)
    rows.append(("winner changed by confirmation", f"{changed} of {len(results)}",
                 f"{args.trials} trials, top {args.top} x {args.confirm_seeds} seeds"))
    print_figures("Confirmation: how often the mean over new seeds changes the winner", rows)
    figures = {"changed": changed, "sweeps": len(results), "results": results}
    save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
