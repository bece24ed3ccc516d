"""Benchmark 2, in-trial throughput: training tokens/s inside one sweep trial (Ray Tune
trial -> TorchTrainer -> worker) against the same loop (`trainables.sft.train` with a
report callable that only records) in one plain process without Ray: same model, data,
batch, thread count and sampled hyperparameters. Evaluation time is excluded from both.

    flock /tmp/sweeper-ray.lock python -m benchmarks.throughput --steps 90
"""

from __future__ import annotations

import argparse
from pathlib import Path


from benchmarks.common import bench_spec, plain_run, print_figures, run_bench_sweep, save_json, tokens_per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=90, help="optimizer steps in the trial and the plain run")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    import ray

    from sweeper.spec import with_overrides

    spec = bench_spec(
        "bench-throughput",
        training={"max_steps": args.steps, "eval_every": args.eval_every},
        search={"num_trials": 1},
        early_stopping={"scheduler": "none"},
    )
    run = run_bench_sweep(spec)
    (trial,) = run.book.trials.values()
    in_trial = tokens_per_second(trial.history)
    ray.shutdown()  # the plain run gets the machine without Ray's processes

    plain = plain_run(with_overrides(spec, trial.params))
    figures = {
        "steps": args.steps,
        "in_trial_tokens_per_s": in_trial,
        "plain_tokens_per_s": plain.tokens_per_second,
        "ratio": in_trial / plain.tokens_per_second,
    }
    print_figures(
        f"throughput: {args.steps} steps, batch {spec.training.per_device_batch_size}, "
        f"{spec.resources.cpus_per_worker:g} thread(s)",
        [
            ("tokens/s in a sweep trial", f"{in_trial:,.0f}", "Tune trial -> TorchTrainer -> 1 worker"),
            ("tokens/s in a plain process", f"{plain.tokens_per_second:,.0f}", "sft.train, no Ray"),
            ("ratio", f"{figures['ratio']:.2f}x", "target >= 0.95x"),
        ],
    )
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
