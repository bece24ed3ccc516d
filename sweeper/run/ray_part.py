"""Ray's part of a trial, measured on the sweep's own cluster before its forecast.

The calibration times the training loop alone (sweeper/plan/calibrate.py). What Ray adds
to a trial's start (a Train run's placement group and workers, the first wave's new
processes) and to each report (its way to the driver) the forecast took from constants
measured on one 2-core machine (sweeper/cost/throughput.py),
until a sweep of the same shape had ended on the machine in use and left its figures
(sweeper/plan/machine_profile.py). On a newcomer's first sweep those constants were what
the forecast missed: Ray's part of a start was 1.9 s on a fresh clone's 2-core VM against
the constant's 1.0 s, and the quickstart's forecast read 31 % low (benchmarks/README.md).

So `sweep start` runs, where no such sweep has ended yet, waves of trials of an empty
training loop through the sweep's own trial function (`run_trial`: its TorchTrainer, its
workers' resources, its report callback), as many at once as the sweep runs, with Tune
reusing the trial actors as the sweep does, and times them from the driver as the live
forecast times a sweep's trials (sweeper/run/live_forecast.py): the first wave starts
cold, the later ones (WARM_STARTS trials at least) as the sweep's later trials do. It costs
a few seconds on the 2-core machine, once per shape.

Between its first two reports each empty run keeps its training thread busy with small
torch steps, and reports the thread's share of a core in that time: the calibration's
copies train with nothing of the sweep around them, and on the 2-core machine a sweep's
training thread got 0.75-0.89 of a core against their 0.97-1.00 (benchmarks/README.md).

Where the sweep runs trials at once, one more empty trial runs after the waves, alone, and
its busy steps (counted at a whole core, as a sweep's trial alone has) against the waves'
give a trial's time alone over its time beside others:
a sweep's last trials often train alone, and on the 2-core machine they went about 0.8x
the time; the live ETA, which kept the prior's 1.0 until a trial had run alone, read 11-13 %
high on the long sweep for that (benchmarks/README.md, session 40).
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import tempfile
import time
from unittest import mock

from ray.tune import Callback
from ray.tune.search import Searcher

from sweeper.cost.throughput import SLOT_TURNAROUND_SECONDS, RayPart
from sweeper.plan.sweep_plan import SweepPlan
from trainables.metrics import TRAIN_CPU_SHARE

__all__ = [
    "measure_ray_part", "measure_ray_part_for_plan", "RunTimes", "AloneLast", "empty_loop", "busy_steps",
    "MEASURING_TRIAL_PREFIX",
]

logger = logging.getLogger(__name__)

# Reports each empty run makes. The first ends the run's start. Before the second the loop
# works BUSY_SECONDS (busy steps on CPU trials, a sleep on GPU ones), and the second carries
# the busy thread's share of a core. Before the third it sleeps REPORT_GAP_SECONDS: that
# interval times a report's way to the driver. The busy one cannot: the driver's own work
# waits for a core while the threads are busy, and on the 2-core machine the arrivals of
# the first and second report came closer together than the loop's work between them.
REPORTS = 3
BUSY_SECONDS = 0.5
REPORT_GAP_SECONDS = 0.1
BUSY_SECONDS_METRIC = "busy_seconds"  # how long the loop's work before this report took
BUSY_STEP_SECONDS_METRIC = "busy_step_seconds"  # the busy loop's seconds per step
# Trial starts measured after the first wave (in the actors it leaves), at the least: one
# alone was off by a second now and then on the 2-core machine (it read 2.2 s where the
# sweep's own starts took 1.2 s, and the forecast read 68 % high).
WARM_STARTS = 4
# The start of the empty trials' names (and of their Train workers' Repr in the dashboard).
MEASURING_TRIAL_PREFIX = "measuring-ray-part-"


def empty_loop(config: dict) -> None:
    """A trial's worker with nothing to train: it imports what the real loop imports
    (trainables/worker.py, the task's loop), then reports REPORTS times, rank 0 with a
    checkpoint of one small file, the first report naming the run's placement group as the
    real loop's does (the driver releases it when the trial ends). Between the first two
    the thread is busy on CPU trials (`busy_steps`, on as many intra-op threads as the
    real loop's) and the second report carries its share of a core; then it sleeps."""
    import importlib

    import ray
    import ray.train

    import trainables.worker  # noqa: F401
    from trainables.metrics import PLACEMENT_GROUP

    trial = config["trial"]
    importlib.import_module(f"trainables.{trial.task}")
    placement_group = ray.util.get_current_placement_group()
    rank = ray.train.get_context().get_world_rank()
    for index in range(REPORTS):
        metrics = {"step": index + 1}
        if index == 1 and not trial.resources.use_gpu:  # a GPU trial's steps are the GPU's: no share to measure
            seconds, share, steps = busy_steps(BUSY_SECONDS, threads=max(1, int(trial.resources.cpus_per_worker)))
            metrics |= {BUSY_SECONDS_METRIC: seconds, TRAIN_CPU_SHARE: share, BUSY_STEP_SECONDS_METRIC: seconds / steps}
        elif index:
            started = time.perf_counter()
            time.sleep(BUSY_SECONDS if index == 1 else REPORT_GAP_SECONDS)
            metrics[BUSY_SECONDS_METRIC] = time.perf_counter() - started
        if index == 0 and placement_group is not None:
            metrics[PLACEMENT_GROUP] = placement_group.id.hex()
        if rank != 0:
            ray.train.report(metrics)
            continue
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "report.json"), "w") as file:
                file.write("{}")
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


def busy_steps(seconds: float, threads: int) -> tuple[float, float, int]:
    """Small torch steps (a matmul's forward and backward, as a small model's loop runs
    them) on `threads` intra-op threads for `seconds`: the seconds they took, this
    thread's CPU time over them (as the real loop measures its `train_cpu_share`) and
    how many steps ran."""
    import torch

    torch.set_num_threads(threads)
    inputs = torch.randn(64, 64)
    weight = torch.randn(64, 64, requires_grad=True)
    started, cpu_started, steps = time.perf_counter(), time.thread_time(), 0
    while time.perf_counter() - started < seconds:
        (inputs @ weight).relu().sum().backward()
        steps += 1
    took = time.perf_counter() - started
    return took, (time.thread_time() - cpu_started) / took, steps


class AloneLast(Searcher):
    """The empty trials' order: `in_waves` trials (Tune runs them as many at once as the
    sweep), then, where `alone` is set, one more once all of them have ended, so that it
    runs alone. Each trial's config is empty: the trainable's parameters carry the rest."""

    def __init__(self, in_waves: int, alone: bool) -> None:
        super().__init__()
        self.left, self.running, self.alone = in_waves, 0, alone

    def suggest(self, trial_id: str) -> dict | str | None:
        if self.left:
            self.left, self.running = self.left - 1, self.running + 1
            return {}
        if not self.alone:
            return Searcher.FINISHED  # the trials already running go on
        if self.running:
            return None  # asked again at Tune's next step
        self.alone, self.running = False, 1
        return {}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.running -= 1

    # The empty trials are never resumed: nothing to save (Tune's default warns on stderr
    # at every experiment checkpoint that saving is not implemented).
    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass


class RunTimes(Callback):
    """Tune callback on the driver: when each trial started, reported and ended, as the
    live forecast reads them, what its loop measured between reports, and the figures they
    come to (`ray_part`). With `alone_last`, the last trial ran alone after the waves
    (`AloneLast`)."""

    def __init__(self, concurrent_trials: int, alone_last: bool = False, clock=time.time) -> None:
        self.concurrent_trials, self.alone_last, self.clock = concurrent_trials, alone_last, clock
        self.starts: dict[str, tuple[float, bool]] = {}  # trial id -> (start, in the first wave)
        self.reports: dict[str, list[float]] = {}
        self.busy: dict[str, list[float]] = {}  # trial id -> its loop's work between reports, seconds
        self.cpu_shares: dict[str, float] = {}  # trial id -> its busy thread's share of a core
        self.step_seconds: dict[str, float] = {}  # trial id -> its busy loop's seconds per step
        self.ends: dict[str, float] = {}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.starts[trial.trial_id] = (self.clock(), len(self.starts) < self.concurrent_trials)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.reports.setdefault(trial.trial_id, []).append(self.clock())
        if BUSY_SECONDS_METRIC in result:
            self.busy.setdefault(trial.trial_id, []).append(result[BUSY_SECONDS_METRIC])
        if TRAIN_CPU_SHARE in result:
            self.cpu_shares[trial.trial_id] = result[TRAIN_CPU_SHARE]
        if BUSY_STEP_SECONDS_METRIC in result:
            self.step_seconds[trial.trial_id] = result[BUSY_STEP_SECONDS_METRIC]

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.ends[trial.trial_id] = self.clock()

    def alone(self) -> set[str]:
        """The trial that ran alone: the last to start, where one ran after the waves."""
        if not self.alone_last or not self.starts:
            return set()
        return {max(self.starts, key=lambda t: self.starts[t][0])}

    def ray_part(self, seconds: float) -> RayPart | None:
        """The figures, or None unless every trial reported REPORTS times and ended, and one
        of the waves started after the first. Medians, so that one slow start moves nothing:

        - a report's way: the last interval between two reports less the loop's sleep in it;
        - a start: from the trial's start to its first report, less one report's way (the
          live forecast counts that in the evaluation), of the waves' trials after the first;
        - the cold start: the first wave's start over the later ones';
        - a stop: from a trial's last report to its end;
        - a turnaround: from a run's end to the next run's start, the slot freed first
          going first;
        - the CPU share: what the waves' busy loops measured (None where none was busy);
        - a trial alone: the alone trial's CPU seconds per busy step (its seconds per step
          times its thread's share of a core) over the waves' seconds per step (None
          without it), at most 1: alone, a trial is not slower. CPU seconds, because
          alone a sweep's training thread had 0.97-0.99 of a core on the 2-core machine,
          while the empty trial alone shared the cores with whatever Ray still did after
          the waves, and read 0.89 against its sweep's 0.73 (benchmarks/README.md).
        The alone trial waited for the waves to end, so only its busy steps count."""
        whole = [t for t, times in self.reports.items() if len(times) == REPORTS and t in self.ends]
        alone = self.alone()
        waves = [t for t in whole if t not in alone]
        if len(whole) < len(self.starts) or not any(not self.starts[t][1] for t in waves):
            return None
        gaps = [self.reports[t][-1] - self.reports[t][-2] - self.busy[t][-1] for t in waves if t in self.busy]
        report = max(0.0, statistics.median(gaps)) if gaps else 0.0
        starts = {t: max(0.0, self.reports[t][0] - self.starts[t][0] - report) for t in waves}
        later = [t for t in waves if not self.starts[t][1]]
        cold = statistics.median(s for t, s in starts.items() if self.starts[t][1])
        warm = statistics.median(starts[t] for t in later)
        stop = statistics.median(self.ends[t] - self.reports[t][-1] for t in waves)
        # Each later start takes the slot freed first, as the live forecast pairs them.
        freed = zip(sorted(self.starts[t][0] for t in later), sorted(self.ends[t] for t in waves))
        turnarounds = [start - end for start, end in freed if end <= start]
        shares = [self.cpu_shares[t] for t in waves if t in self.cpu_shares]
        beside = [self.step_seconds[t] for t in waves if t in self.step_seconds]
        alone_steps = [self.step_seconds[t] * self.cpu_shares.get(t, 1.0) for t in alone if t in self.step_seconds]
        return RayPart(
            start_seconds=warm,
            report_seconds=report,
            cold_start_seconds=max(0.0, cold - warm),
            trials=len(whole),
            seconds=seconds,
            stop_seconds=max(0.0, stop),
            turnaround_seconds=statistics.median(turnarounds) if turnarounds else SLOT_TURNAROUND_SECONDS,
            cpu_share=statistics.median(shares) if shares else None,
            alone_ratio=min(1.0, alone_steps[0] / statistics.median(beside)) if alone_steps and beside else None,
        )


def measure_ray_part(plan: SweepPlan) -> RayPart | None:
    """Run waves of the plan's trials at once with the empty loop on the cluster (Ray is
    up), a first and as many more as make WARM_STARTS starts, then (where the plan runs
    trials at once) one alone, and time them; None where
    that failed (the forecast then keeps the constants, and says so). Ctrl-C stops it as it
    stops `sweep start`: nothing else ran."""
    from ray import tune

    from sweeper.run.release import ReleaseFinishedRuns
    from sweeper.run.trial import TRIAL_ACTOR_RESOURCES, WORKER_START_FLOOR_S, run_trial

    started = time.time()
    concurrent = plan.concurrent_trials
    in_waves = (1 + math.ceil(WARM_STARTS / concurrent)) * concurrent
    # On GPUs a busy loop measures nothing (their steps are the GPU's); each trial has its own.
    alone = concurrent > 1 and not plan.spec.resources.use_gpu
    times = RunTimes(concurrent, alone_last=alone)
    with tempfile.TemporaryDirectory(prefix="sweeper-ray-part-") as folder, tune_quiet_and_interruptible():
        trainable = tune.with_parameters(
            run_trial,
            trial_config=plan.spec.trial_config(),
            max_failures=0,
            data={},  # the empty loop reads neither the data nor the model cache
            cache_root=folder,
            trials_dir=folder,
            worker_start_timeout_s=WORKER_START_FLOOR_S,
            train_loop=empty_loop,
        )
        trainable.__name__ = "ray_part"
        tuner = tune.Tuner(
            tune.with_resources(trainable, TRIAL_ACTOR_RESOURCES),
            tune_config=tune.TuneConfig(
                search_alg=AloneLast(in_waves, alone), num_samples=in_waves + alone,
                max_concurrent_trials=concurrent, reuse_actors=True,
                # The Repr of their Train workers in the dashboard: not the sweep's trials.
                trial_name_creator=measuring_trial_name,
            ),
            run_config=tune.RunConfig(
                name="ray-part", storage_path=folder, callbacks=[times, ReleaseFinishedRuns()], verbose=0
            ),
        )
        try:
            results = tuner.fit()
        except Exception as error:  # a forecast never fails on this: it keeps the constants
            logger.warning("Ray's part of a trial was not measured: %s", error)
            return None
        if results.errors:
            logger.warning("Ray's part of a trial was not measured: %s", results.errors[0])
            return None
    return times.ray_part(time.time() - started)


def measure_ray_part_for_plan(plan: SweepPlan, address: str | None) -> RayPart | None:
    """`sweep plan`'s measure, as `sweep start` would take it: on the cluster joined
    (`address`), else on a local cluster started for it as `sweep start` starts one and
    stopped again. Without it a
    newcomer's first plan took Ray's part from constants measured on one 2-core machine."""
    import ray

    from sweeper.cluster.connect import LOCAL_CLUSTER, start_ray, stop_local_cluster

    if address or ray.is_initialized():
        return measure_ray_part(plan)
    try:
        start_ray(LOCAL_CLUSTER, metadata={"job_name": f"{plan.spec.name} (sweep plan)"})
        return measure_ray_part(plan)
    except Exception as error:  # as in measure_ray_part: the plan keeps the constants and says so
        logger.warning("Ray's part of a trial was not measured: %s", error)
        return None
    finally:
        stop_local_cluster()


def measuring_trial_name(trial) -> str:
    return f"{MEASURING_TRIAL_PREFIX}{trial.trial_id}"


def tune_quiet_and_interruptible():
    """Tune's own Ctrl-C handler ends a run quietly and returns; here Ctrl-C must stop
    `sweep start` as it would a moment later, so Tune leaves SIGINT alone. And Tune's
    progress output (its experiment box, "View detailed results here: <a folder deleted
    a moment later>") is the legacy reporter's at verbose 0 here: none. The environment
    as it was afterwards."""
    return mock.patch.dict(os.environ, {"TUNE_DISABLE_SIGINT_HANDLER": "1", "RAY_AIR_NEW_OUTPUT": "0"})
