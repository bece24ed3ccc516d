"""Benchmark 2, in-trial throughput: training tokens/s inside one sweep trial (Ray Tune
trial -> TorchTrainer -> worker) against the same loop (`trainables.sft.train` with a
report callable that only records) in one plain process without Ray: same model, data,
batch, thread count and sampled hyperparameters. Evaluation time is excluded from both.

On a shared machine one run of each says little (plain runs alone differ by 10-40 %), so
the benchmark runs rounds of a one-trial sweep followed by the plain loop and reports
the median ratio. It also reports tokens per CPU-second of the training thread, which
other processes and the hypervisor do not move: equal figures mean the loop does the
same work per token in a trial, and a lower tokens/s comes from the thread waiting.

    flock /tmp/sweeper-ray.lock python -m benchmarks.throughput --steps 90 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchmarks.common import (
    bench_spec,
    plain_run,
    print_figures,
    run_bench_sweep,
    save_json,
    tokens_per_cpu_second,
    tokens_per_second,
)


def one_round(steps: int, eval_every: int) -> dict:
    """A one-trial sweep on a fresh local Ray cluster, then, with Ray shut down, the plain
    loop on the hyperparameters the trial drew."""
    import ray

    from sweeper.spec import with_overrides

    spec = bench_spec(
        "bench-throughput",
        training={"max_steps": steps, "eval_every": eval_every},
        search={"num_trials": 1},
        early_stopping={"scheduler": "none"},
    )
    run = run_bench_sweep(spec)
    (trial,) = run.book.trials.values()
    ray.shutdown()  # the plain run gets the machine without Ray's processes
    plain = plain_run(with_overrides(spec, trial.params))
    return {
        "trial_tokens_per_s": tokens_per_second(trial.history),
        "plain_tokens_per_s": plain.tokens_per_second,
        "trial_tokens_per_cpu_s": tokens_per_cpu_second(trial.history),
        "plain_tokens_per_cpu_s": tokens_per_cpu_second(plain.reports),
        "trial_cpu_share": tokens_per_second(trial.history) / tokens_per_cpu_second(trial.history),
        "plain_cpu_share": plain.tokens_per_second / tokens_per_cpu_second(plain.reports),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=90, help="optimizer steps in the trial and the plain run")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="trial + plain pairs; the median ratio is the figure")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    rounds = [one_round(args.steps, args.eval_every) for _ in range(args.rounds)]
    ratios = [r["trial_tokens_per_s"] / r["plain_tokens_per_s"] for r in rounds]
    cpu_ratios = [r["trial_tokens_per_cpu_s"] / r["plain_tokens_per_cpu_s"] for r in rounds]
    figures = {
        "steps": args.steps,
        "rounds": rounds,
        "ratio_median": statistics.median(ratios),
        "cpu_ratio_median": statistics.median(cpu_ratios),
    }
    rows = []
    for number, (r, ratio, cpu_ratio) in enumerate(zip(rounds, ratios, cpu_ratios), start=1):
        rows.append((
            f"round {number}: tokens/s, trial / plain",
            f"{r['trial_tokens_per_s']:,.0f} / {r['plain_tokens_per_s']:,.0f} = {ratio:.2f}x",
            f"per CPU-second {r['trial_tokens_per_cpu_s']:,.0f} / {r['plain_tokens_per_cpu_s']:,.0f} = "
            f"{cpu_ratio:.2f}x; CPU share {r['trial_cpu_share']:.2f} / {r['plain_cpu_share']:.2f}",
        ))
    rows += [
        ("tokens/s ratio, median", f"{figures['ratio_median']:.2f}x", "target >= 0.95x"),
        ("tokens per CPU-second ratio, median", f"{figures['cpu_ratio_median']:.2f}x", "the loop's own work per token"),
    ]
    print_figures(f"throughput: {args.steps} steps, {args.rounds} rounds of one trial, then the plain loop", rows)
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
