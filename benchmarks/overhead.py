"""Benchmark 1, per-trial overhead: a sweep of N trials of K steps on the built-in model
(no early stopping, so every trial trains K steps), run through `sweeper.run._launch.run_sweep`.

Figures: per-trial setup (trial start to first optimizer step, as each trial reports it:
median and p90) and the sweep's wall time against its minimum, where the minimum is
trained steps x step time / concurrent trials + one trial's setup, and the step time is
the same loop's in one plain process (evaluations and checkpoints included). A second
minimum takes the step time of as many plain processes as the sweep runs trials at
once, side by side (after the sweep, Ray shut down): what the machine itself gives to
concurrent trainings, with no Ray in the way.

    flock /tmp/sweeper-ray.lock python -m benchmarks.overhead --trials 8 --steps 30
    flock /tmp/sweeper-ray.lock python -m benchmarks.overhead --address 127.0.0.1:6379   # a head already running

With `--address` the sweep joins that cluster instead of starting its own, as
`sweep start --address` does: "Ray start + data" is then the join.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import ray

from benchmarks.common import (
    bench_spec,
    percentile,
    plain_run,
    plain_side_by_side,
    print_figures,
    run_bench_sweep,
    save_json,
)


# The setup phases a trial's first report carries (trainables/worker.py), as seconds
# since the trial started.
PHASES = {
    "worker_process_started": "Train worker process created (several-worker trials)",
    "train_loop_entered": "its imports done, train loop entered",
    "data_and_task_ready": "data fetched, task module imported",
}


def busy_cpu_seconds() -> float:
    """CPU-seconds this machine has spent busy (all processes, user and system time;
    time the hypervisor gave to other guests not included). Unlike wall time, a sweep's
    share of it does not grow when the machine is shared."""
    import psutil

    times = psutil.cpu_times()
    return times.user + times.nice + times.system + getattr(times, "irq", 0.0) + getattr(times, "softirq", 0.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8, help="N: trials in the sweep")
    parser.add_argument("--steps", type=int, default=30, help="K: optimizer steps per trial")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--address", help="a running cluster to join (default: a local cluster of its own)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    spec = bench_spec(
        "bench-overhead",
        training={"max_steps": args.steps, "eval_every": args.eval_every},
        search={"num_trials": args.trials},
        early_stopping={"scheduler": "none"},
    )
    plain = plain_run(spec)  # before Ray starts: the step time on a quiet machine

    cpu_before = busy_cpu_seconds()
    started = time.time()
    run = run_bench_sweep(spec, address=args.address)
    wall = time.time() - started
    cpu_used = busy_cpu_seconds() - cpu_before
    trials = list(run.book.trials.values())
    setups = [t.setup_seconds for t in trials if t.setup_seconds is not None]
    steps = sum(t.step for t in trials)
    slots = run.plan.concurrent_trials
    median_setup = statistics.median(setups)
    # A one-worker trial runs in a process Tune reuses: the first trial of each process
    # pays its imports, the later ones only their model and data.
    first_in_process = [t.setup_seconds for t in trials
                        if t.setup_seconds is not None and not t.setup_phases.get("trials_before_in_process")]
    reused = [t.setup_seconds for t in trials if t.setup_seconds is not None and t.setup_phases.get("trials_before_in_process")]
    minimum = steps * plain.seconds_per_step / slots + median_setup
    ray.shutdown()  # the side-by-side runs get the machine without Ray's processes (a head joined stays)
    side_by_side = statistics.median(run.seconds_per_step for run in plain_side_by_side(spec, slots))
    minimum_side_by_side = steps * side_by_side / slots + median_setup
    before_tune = run.book.started_at - started
    phases = {
        name: statistics.median(t.setup_phases[name] for t in trials if name in t.setup_phases)
        for name in ("worker_process_started", "train_loop_entered", "data_and_task_ready")
        if any(name in t.setup_phases for t in trials)
    }

    figures = {
        "trials": len(trials),
        "completed": run.book.count("completed"),
        "concurrent_trials": slots,
        "steps_trained": steps,
        "plain_seconds_per_step": plain.seconds_per_step,
        "plain_side_by_side_seconds_per_step": side_by_side,
        "minimum_side_by_side_s": minimum_side_by_side,
        "wall_over_minimum_side_by_side": wall / minimum_side_by_side,
        "trials_wall_over_minimum_side_by_side": (wall - before_tune) / minimum_side_by_side,
        "setup_median_s": median_setup,
        "setup_p90_s": percentile(setups, 90),
        "setup_max_s": max(setups),
        "setup_first_in_process_median_s": statistics.median(first_in_process) if first_in_process else None,
        "setup_reused_process_median_s": statistics.median(reused) if reused else None,
        "ray_start_and_data_s": before_tune,
        "wall_s": wall,
        "minimum_s": minimum,
        "wall_over_minimum": wall / minimum,
        "trials_wall_s": wall - before_tune,
        "trials_wall_over_minimum": (wall - before_tune) / minimum,
        "trial_wall_median_s": statistics.median(t.wall_seconds for t in trials),
        "setup_phases_median_s": phases,
        "cpu_seconds": cpu_used,
        "cpu_seconds_per_trial": cpu_used / len(trials),
    }
    print_figures(
        f"overhead: {len(trials)} trials x {args.steps} steps, {slots} at a time "
        f"({figures['completed']} completed)",
        [
            ("setup per trial, median", f"{median_setup:.1f} s", "trial start -> first optimizer step; target <= 5 s"),
            ("setup per trial, p90", f"{figures['setup_p90_s']:.1f} s", f"max {figures['setup_max_s']:.1f} s"),
            *[(f"  {label}, median", f"{seconds:.1f} s", f"{len(group)} trial(s)")
              for label, group, seconds in (
                  ("first trial of a process", first_in_process, figures["setup_first_in_process_median_s"]),
                  ("trial in a reused process", reused, figures["setup_reused_process_median_s"]))
              if group],
            *[(f"  {name}, median", f"{seconds:.1f} s", PHASES[name]) for name, seconds in phases.items()],
            ("trial wall, median", f"{figures['trial_wall_median_s']:.1f} s", "driver: trial start -> trial end"),
            ("step time, plain process", f"{plain.seconds_per_step * 1000:.0f} ms", "sft.train without Ray, evals included"),
            (
                f"step time, {slots} plain processes side by side",
                f"{side_by_side * 1000:.0f} ms",
                "median; what the machine gives to concurrent trainings",
            ),
            ("steps trained", f"{steps}", "sum over trials"),
            ("sweep minimum", f"{minimum:.1f} s", "steps x step time / slots + median setup"),
            ("Ray start + data", f"{before_tune:.1f} s", "run_sweep start -> first trial scheduled"),
            ("sweep wall", f"{wall:.1f} s", "run_sweep, as `sweep start` runs it"),
            ("wall / minimum", f"{wall / minimum:.2f}x", "target <= 1.15x"),
            (
                "wall without Ray start / minimum",
                f"{figures['trials_wall_over_minimum']:.2f}x",
                f"{figures['trials_wall_s']:.1f} s from the first trial's scheduling to the end",
            ),
            (
                "wall / minimum with the side-by-side step time",
                f"{figures['wall_over_minimum_side_by_side']:.2f}x",
                f"minimum {minimum_side_by_side:.1f} s; without Ray start "
                f"{figures['trials_wall_over_minimum_side_by_side']:.2f}x",
            ),
            (
                "CPU-seconds, whole machine",
                f"{cpu_used:.0f} s",
                f"{figures['cpu_seconds_per_trial']:.1f} s per trial (Ray start included); steal-proof",
            ),
        ],
    )
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
