"""Benchmark 4, the read-only commands: `sweep list`, `sweep status NAME` and `sweep report
NAME` on a finished 200-trial sweep, each run as a user runs it (a new process), median of
`--repeats`.

The sweep is written into a fresh SQLite MLflow store by the product's own writer
(`MlflowTracker`, driven through its Tune callback methods without a Ray cluster): the
quickstart's config and search space with 200 trials, ASHA by promotion's shape (every
trial to step 10, a third of them to 30, a third of those to 90, a few failed), reports
every 10 steps with the keys a real SFT trial reports.

    python -m benchmarks.readonly                # 200 trials, median of 3
    python -m benchmarks.readonly --trials 50 --repeats 1 --keep /tmp/readonly
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, bench_spec, print_figures, save_json
from sweeper.names import TrialState
from trainables import metrics as m

NAME = "readonly"
COMMANDS = {
    "list": ["list"],
    "status": ["status", NAME],
    "report": ["report", NAME],
}
TARGETS = {"list": 1.0, "status": 1.0, "report": 5.0}


def trial_outcomes(
    trials: int, rungs: list[int], max_steps: int, reduction_factor: float, failed: int
) -> list[tuple[TrialState, int]]:
    """(state, last step) per trial as ASHA by promotion leaves them: everyone to the first
    rung, the rung quota of them on to each next milestone; `failed` trials fail before
    their first evaluation."""
    from sweeper.plan import milestone_counts

    counts = milestone_counts(trials, rungs, max_steps, reduction_factor)
    outcomes = []
    for (milestone, reaching), (_, going_on) in zip(counts, [*counts[1:], (max_steps, 0)]):
        state = TrialState.COMPLETED if milestone == max_steps else TrialState.PRUNED
        outcomes += [(state, milestone)] * (reaching - going_on)
    # Failures take the places of trials that would have stopped at the first rung.
    for index in range(min(failed, len(outcomes))):
        outcomes[index * 7 % len(outcomes)] = (TrialState.FAILED, 0)
    return outcomes


def write_sweep(folder: Path, trials: int, seed: int = 0) -> str:
    """A finished sweep of `trials` trials in `folder/mlflow.db`, written by MlflowTracker;
    returns the tracking URI."""
    from sweeper.track import SweepBook, TrialRecord
    from sweeper.plan import ClusterResources, make_plan
    from sweeper.track import client_for, ensure_experiment, MlflowTracker

    spec = bench_spec(NAME, output_dir=folder, search={"num_trials": trials})
    plan = make_plan(spec, ClusterResources(cpus=2, gpus=0, max_node_cpus=2, max_node_gpus=0))
    uri = spec.tracking.uri
    book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=spec.training.max_steps)
    # The experiment first, with its artifacts beside the store (not in the working folder).
    ensure_experiment(client_for(uri), spec.tracking.experiment, (folder / "mlartifacts").resolve().as_uri())
    tracker = MlflowTracker(spec, book, uri, hardware="benchmark")
    tracker.start_sweep(REPO)
    rng = random.Random(seed)
    outcomes = trial_outcomes(
        trials, plan.rungs, spec.training.max_steps, spec.early_stopping.reduction_factor_for(), failed=max(1, trials // 50)
    )
    rng.shuffle(outcomes)
    now = time.time()
    for number, (state, last_step) in enumerate(outcomes, start=1):
        trial_id = f"{number:05d}_{rng.randrange(16**5):05x}"
        params = {
            "training.learning_rate": 10 ** rng.uniform(-4, -1.5),
            "lora.r": rng.choice([2, 4, 8, 16]),
            "training.warmup_ratio": rng.uniform(0, 0.1),
        }
        record = book.trials[trial_id] = TrialRecord(trial_id, number, params, started_at=now - 30)
        tracker.trial_started(record)
        quality = rng.uniform(3.5, 4.5)
        failed = state == TrialState.FAILED
        reported = [] if failed else range(spec.training.eval_every, last_step + 1, spec.training.eval_every)
        for step in reported:
            loss = quality + 2.0 / (1 + step / 10)
            report = {
                m.STEP: step, m.EVAL_LOSS: loss, m.EVAL_PERPLEXITY: 2.718 ** loss, m.TRAIN_LOSS: loss + 0.1,
                m.LEARNING_RATE: params["training.learning_rate"], m.TOKENS_PER_SECOND: 8000.0,
                m.TRAIN_TOKENS: 10240, m.TRAIN_CPU_SHARE: 0.97,
            }
            if step == spec.training.eval_every:
                report[m.SETUP_SECONDS] = rng.uniform(0.8, 2.0)
            record.history.append(report)
            tracker.trial_result(record)
        record.state, record.ended_at = state, now
        record.error = "RuntimeError: loss is nan" if failed else None
        if not failed:
            record.checkpoint_path = str(spec.sweep_dir / trial_id / "checkpoint")
        tracker.trial_finished(record)
    tracker.finish_sweep()
    return uri


def time_command(args: list[str], cwd: Path, uri: str, repeats: int, code: Path = REPO) -> list[float]:
    """Wall seconds of `sweep ARGS` in a new process, `repeats` times, with the package
    imported from checkout `code`."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(code)}
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "sweeper.cli", *args, "--tracking-uri", uri],
            cwd=cwd, env=env, capture_output=True, text=True,
        )
        seconds.append(time.perf_counter() - started)
        if result.returncode != 0:
            raise RuntimeError(f"sweep {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path,
                        help="Write the sweep here and keep it, or reuse the one written here (default: a temporary folder).")
    parser.add_argument("--code", type=Path, default=REPO,
                        help="Time the commands of this checkout (e.g. an older one, for before/after) on the same store.")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    folder = args.keep or Path(tempfile.mkdtemp(prefix="sweeper-bench-readonly-"))
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if (folder / "mlflow.db").is_file():  # a sweep written by an earlier --keep run
        uri, write_seconds = f"sqlite:///{folder.resolve() / 'mlflow.db'}", 0.0
    else:
        uri = write_sweep(folder, args.trials)
        write_seconds = time.perf_counter() - started
    figures: dict = {"trials": args.trials, "write_seconds": write_seconds, "code": str(args.code.resolve())}
    rows = [("sweep written (MlflowTracker)", f"{write_seconds:.1f} s", f"{args.trials} trials, SQLite store")]
    for name, command in COMMANDS.items():
        seconds = time_command(command, folder, uri, args.repeats, args.code.resolve())
        median = statistics.median(seconds)
        figures[name] = {"median_s": median, "runs_s": seconds}
        runs = ", ".join(f"{s:.2f}" for s in seconds)
        rows.append((f"sweep {' '.join(command)}", f"{median:.2f} s", f"median of {runs}; target < {TARGETS[name]:g} s"))
    print_figures(f"Read-only commands on a finished {args.trials}-trial sweep", rows)
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
