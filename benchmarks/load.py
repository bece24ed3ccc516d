"""Benchmark 8, load: a sweep of 2,000 short trials on the built-in model, run through
`sweeper.run._launch.run_sweep` as `sweep start` runs it (TPE with ASHA, the defaults),
and what its driver and store look like at the end.

Figures (issue 35's targets):
- the sweep finishes; every trial is in MLflow and in the Optuna study with the same
  state, none RUNNING;
- the driver's resident memory when trial 2,000 started within 1.2x of when trial 200
  did;
- the sweep's seconds per trial (between trial starts) over the last 10% of trials no
  worse than around trial 200 (trials 101-200);
- `sweep list` and `sweep status NAME` under 1 s, `sweep report NAME` under 10 s on it,
  each in a new process as a user runs it.

The curve (driver RSS and seconds per trial against trials started, one row per 10% of the
trials) is printed and, with `--json`, written out.

    flock /tmp/sweeper-ray.lock python -m benchmarks.load                # 2,000 trials
    flock /tmp/sweeper-ray.lock python -m benchmarks.load --trials 40    # a quick look
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import psutil
from ray.tune import Callback

from benchmarks.common import bench_spec, print_figures, run_bench_sweep, save_json
from benchmarks.readonly import TARGETS, time_command

NAME = "load"
REPORT_TARGET_S = 10.0  # issue 35 allows a 2,000-trial report 10 s (the 200-trial target is 5 s)


class StartSampler(Callback):
    """Records, as each trial starts for the first time, how many have started, when, and
    the driver's resident memory then. Trial starts, not ends, mark the sweep's pace: under
    ASHA by promotion a trial paused at a rung ends much later, when it goes on or is
    stopped. (Tune pickles its callbacks with the experiment, so it keeps no process
    handle.)"""

    def __init__(self, last_trial: int) -> None:
        self.last_trial = last_trial
        self.started: set[str] = set()
        self.samples: list[tuple[int, float, int]] = []  # (trials started, wall time, driver RSS bytes)

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        if trial.trial_id in self.started:  # a paused trial going on
            return
        self.started.add(trial.trial_id)
        self.samples.append((len(self.started), time.time(), psutil.Process().memory_info().rss))
        if tracemalloc.is_tracing() and len(self.started) in (MEMORY_BASELINE_TRIAL, self.last_trial):
            snapshots.append(tracemalloc.take_snapshot())


# With --trace-memory: the driver's allocations when this trial started and when the last
# one did (not after the sweep, when Tune has let go of most of it). A snapshot costs
# memory itself: the RSS figures of a traced run are not the sweep's.
MEMORY_BASELINE_TRIAL = 200
snapshots: list = []


def memory_growth(top: int = 15) -> list[tuple[str, str, str]]:
    """The driver's allocation sites that grew most between trial MEMORY_BASELINE_TRIAL's
    start and the last trial's (tracemalloc, by file and line), as table rows."""
    if len(snapshots) < 2:
        return []
    growth = snapshots[-1].compare_to(snapshots[0], "lineno")
    return [
        (f"{stat.traceback[0].filename.split('site-packages/')[-1]}:{stat.traceback[0].lineno}",
         f"{stat.size_diff / 2**20:+.1f} MiB", f"{stat.count_diff:+d} blocks")
        for stat in growth[:top]
    ]


def seconds_per_trial(samples: list[tuple[int, float, int]], first: int, last: int) -> float:
    """Mean seconds between the starts of trials `first` and `last` (1-based, inclusive)."""
    return (samples[last - 1][1] - samples[first - 1][1]) / max(1, last - first)


def states_agree(uri: str, sweep_dir: Path) -> dict:
    """Each trial's state in MLflow (its run's status and `sweeper.state` tag) and in the
    Optuna study, compared trial by trial."""
    import optuna
    from mlflow.tracking import MlflowClient

    from sweeper.search import TUNE_TRIAL_ID_ATTR, study_url

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("sweeper")
    runs = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`sweeper.sweep_name` = '{NAME}'", max_results=50_000
    )
    trial_runs = {r.data.tags["sweeper.trial_id"]: r for r in runs if r.data.tags["sweeper.kind"] == "trial"}
    parents = [r for r in runs if r.data.tags["sweeper.kind"] == "sweep"]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=NAME, storage=study_url(sweep_dir))
    told = {t.user_attrs.get(TUNE_TRIAL_ID_ATTR): t for t in study.get_trials()}
    optuna_state = {"COMPLETE": "completed", "PRUNED": "pruned", "FAIL": "failed"}
    disagree = [
        trial_id for trial_id, run in trial_runs.items()
        if trial_id not in told or optuna_state.get(told[trial_id].state.name) != run.data.tags.get("sweeper.state")
    ]
    states = dict(Counter(run.data.tags.get("sweeper.state", "?") for run in trial_runs.values()))
    return {
        "mlflow_trial_runs": len(trial_runs),
        "optuna_trials": len(told),
        "states": states,
        "disagreeing": disagree[:20],
        "disagreeing_count": len(disagree) + len(set(told) - set(trial_runs)),
        "mlflow_running": sum(r.info.status == "RUNNING" for r in [*parents, *trial_runs.values()]),
        "optuna_running": sum(t.state.name == "RUNNING" for t in told.values()),
        "parent_status": [r.info.status for r in parents],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per trial that is not pruned")
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each read-only command (median)")
    parser.add_argument("--json", type=Path, help="also write the figures and the curve to this file")
    parser.add_argument("--trace-memory", action="store_true",
                        help=f"tracemalloc in the driver: where its memory grew from trial {MEMORY_BASELINE_TRIAL}'s "
                             "start to the last trial's (slows the driver and costs memory: its times and RSS are "
                             "then not the sweep's)")
    args = parser.parse_args()
    if args.trace_memory:
        tracemalloc.start()

    spec = bench_spec(
        NAME,
        training={"max_steps": args.steps, "eval_every": args.eval_every},
        search={"num_trials": args.trials},
    )
    sampler = StartSampler(last_trial=args.trials)
    started = time.time()
    run = run_bench_sweep(spec, extra_callbacks=[sampler])
    wall = time.time() - started
    import ray

    ray.shutdown()
    samples = sampler.samples
    started_count = len(samples)
    uri = spec.tracking.uri
    agreement = states_agree(uri, spec.sweep_dir)

    early = min(200, started_count)
    early_window = (max(1, early // 2 + 1), early)  # trials 101-200 at 2,000 trials
    late_window = (max(1, started_count - started_count // 10 + 1), started_count)  # the last 10%
    per_trial_early = seconds_per_trial(samples, *early_window)
    per_trial_late = seconds_per_trial(samples, *late_window)
    rss_early, rss_late = samples[early - 1][2], samples[-1][2]

    readonly = {}
    for name, command in {"list": ["list"], "status": ["status", NAME], "report": ["report", NAME]}.items():
        seconds = time_command(command, spec.output_dir, uri, args.repeats)
        readonly[name] = {"median_s": statistics.median(seconds), "runs_s": seconds}

    step = max(1, started_count // 10)
    curve = []
    for done in range(step, started_count + 1, step):
        window = (max(1, done - step + 1), done)  # the decile ending at this point
        curve.append({
            "trials_started": done,
            "elapsed_s": samples[done - 1][1] - started,
            "driver_rss_mib": samples[done - 1][2] / 2**20,
            "seconds_per_trial": seconds_per_trial(samples, *window),
        })

    figures = {
        "trials": args.trials, "trials_started": started_count, "steps": args.steps, "eval_every": args.eval_every,
        "wall_s": wall, "concurrent_trials": run.plan.concurrent_trials,
        "seconds_per_trial_early": per_trial_early, "early_window": early_window,
        "seconds_per_trial_late": per_trial_late, "late_window": late_window,
        "driver_rss_at_early_mib": rss_early / 2**20, "driver_rss_at_end_mib": rss_late / 2**20,
        "rss_ratio": rss_late / rss_early, "agreement": agreement, "readonly": readonly, "curve": curve,
    }
    rows = [
        ("trials started", f"{started_count} of {args.trials}", f"{agreement['states']}; {run.plan.concurrent_trials} at a time"),
        ("sweep wall", f"{wall:.0f} s", f"{wall / max(1, started_count):.2f} s per trial over the whole sweep"),
        ("MLflow trial runs / Optuna trials", f"{agreement['mlflow_trial_runs']} / {agreement['optuna_trials']}",
         f"{agreement['disagreeing_count']} disagree on state; parent {agreement['parent_status']}"),
        ("RUNNING left (MLflow / Optuna)", f"{agreement['mlflow_running']} / {agreement['optuna_running']}", "target 0 / 0"),
        (f"driver RSS at trial {early} / {started_count}", f"{rss_early / 2**20:.0f} / {rss_late / 2**20:.0f} MiB",
         f"{rss_late / rss_early:.2f}x; target <= 1.2x"),
        (f"seconds per trial, trials {early_window[0]}-{early_window[1]}", f"{per_trial_early:.2f} s", ""),
        (f"seconds per trial, trials {late_window[0]}-{late_window[1]}", f"{per_trial_late:.2f} s",
         f"{per_trial_late / per_trial_early:.2f}x; target: no worse"),
        *[
            (f"sweep {name}", f"{figure['median_s']:.2f} s",
             f"median of {', '.join(f'{s:.2f}' for s in figure['runs_s'])}; "
             f"target < {REPORT_TARGET_S if name == 'report' else TARGETS[name]:g} s")
            for name, figure in readonly.items()
        ],
    ]
    print_figures(f"load: {args.trials} trials x {args.steps} steps (eval every {args.eval_every})", rows)
    print_figures(
        "curve: driver RSS and seconds per trial against trials started",
        [(f"{point['trials_started']}", f"{point['driver_rss_mib']:.0f} MiB",
          f"{point['seconds_per_trial']:.2f} s per trial (the {step} before); {point['elapsed_s']:.0f} s in")
         for point in curve],
    )
    growth = memory_growth()
    if growth:
        print_figures(f"driver memory grown from trial {MEMORY_BASELINE_TRIAL}'s start to the last trial's (tracemalloc)", growth)
        figures["memory_growth"] = growth
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
