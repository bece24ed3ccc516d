"""What task metrics from generation add to a trial's wall time: the quickstart's trial
(`trainables.sft.train` in one plain process, one thread, as a trial's worker runs it)
trained without a generation section and with one at its defaults (answers to 32 eval
prompts, at most 32 new tokens each, generated once, at max_steps), and with
`when: every_eval` for comparison; after one warm-up run, runs alternate, the table gives
the medians over repeats of the process's CPU seconds (one torch thread: what other load
on a shared machine moves least) and of wall seconds. A Ray trial adds its setup on top, so the share is
an upper bound of what a sweep's trial pays.

    python -m benchmarks.generation --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.common import bench_spec, plain_run, print_figures, save_json


def timed(spec, with_generation: bool) -> tuple[float, float, dict]:
    """(wall seconds, this process's CPU seconds, the last report) of one run."""
    started, cpu_started = time.perf_counter(), time.process_time()
    run = plain_run(spec, with_generation=with_generation)
    return time.perf_counter() - started, time.process_time() - cpu_started, run.reports[-1]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=90)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    # A plain run has no rungs: the scheduler is left out (a short run has no room for one).
    common = {"training": {"max_steps": args.steps, "eval_every": min(10, args.steps)}, "early_stopping": {"scheduler": "none"}}
    variants = {
        "none": bench_spec("gen-none", **common),
        "end": bench_spec("gen-end", **common, generation={}),
        "every_eval": bench_spec("gen-every", **common, generation={"when": "every_eval"}),
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in variants}
    last: dict[str, dict] = {}
    timed(variants["end"], with_generation=True)  # warm-up: the built-in model built, imports done
    for _ in range(args.repeats):
        for name, spec in variants.items():
            wall, cpu, report = timed(spec, with_generation=name != "none")
            seconds[name].append(wall)
            cpu_seconds[name].append(cpu)
            last[name] = report
    figures = {"steps": args.steps, "repeats": args.repeats, "seconds": seconds, "cpu_seconds": cpu_seconds}
    base, cpu_base = statistics.median(seconds["none"]), statistics.median(cpu_seconds["none"])
    rows = [("trial without generation", f"{base:.1f} s wall, {cpu_base:.1f} s CPU",
             f"median of {args.repeats}; wall {min(seconds['none']):.1f}-{max(seconds['none']):.1f} s")]
    for name in ("end", "every_eval"):
        cpu_share = statistics.median(cpu_seconds[name]) / cpu_base - 1
        wall_share = statistics.median(seconds[name]) / base - 1
        figures[f"added_cpu_share_{name}"], figures[f"added_wall_share_{name}"] = cpu_share, wall_share
        target = "target <= 25 %" if name == "end" else "for comparison"
        rows.append((f"when: {name}", f"+{100 * cpu_share:.1f} % CPU, +{100 * wall_share:.1f} % wall",
                     f"medians; CPU {min(cpu_seconds[name]):.1f}-{max(cpu_seconds[name]):.1f} s; {target}; "
                     f"last gen_exact_match {last[name].get('gen_exact_match', float('nan')):.3f}"))
    print_figures(f"Generation at its defaults (32 prompts, 32 new tokens) on the quickstart trial, {args.steps} steps", rows)
    save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
