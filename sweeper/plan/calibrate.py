"""Calibration: measure a trial's step time on the target hardware before the sweep.

A few optimizer steps (`steps` to warm up, then `steps` measured, each run followed by
an evaluation) of two configurations: the first (the YAML's own values) and the most
expensive one in the space (the highest value of every searched parameter that makes a
step dearer: LoRA rank, batch size, gradient accumulation). One run gives both seconds
per step (the loop's own training-time measure, `train_tokens / tokens_per_second`) and
seconds per evaluation (the rest of the time between two reports: evaluation, adapter
checkpoint, report).

Where it runs: in this process for a local CPU cluster (one thread per reserved CPU, as a
trial's worker), else as a Ray task with one worker's resources on the cluster, so that a
GPU sweep is measured on a GPU of the cluster.

With the node filled as the sweep fills it: as many copies of the calibration at once as
the sweep runs workers at once on its fullest node (`side_by_side`), each with one
worker's resources, meeting at a barrier after their imports and before each measured
interval; the timings are their mean. Trials side by side slow each other down through
what their node shares (cores, caches, memory bandwidth, the host side of GPUs): a DPO
step calibrated alone at 30-34 ms ran at 46-63 ms with the two trials of the DPO
quickstart side by side on the 2-core machine; two copies side by side measure 33-35 ms
there (the rest is the driver's and Ray's share of the cores, benchmarks/README.md).
Copies are counted per node, because trials on different nodes share nothing but the
driver, and each copy holds a worker's own resources (a GPU copy its own GPU), so a GPU
sweep whose trials run on separate GPUs is timed with its neighbours, not as if they
shared one GPU.

The training loop is called through `run_training` alone.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import statistics
import time
from dataclasses import dataclass, field, replace

from sweeper.cost.throughput import RAY_TRIAL_START_SECONDS
from sweeper.plan.forecast import TrialTiming
from sweeper.plan.sweep_plan import ClusterResources, SweepPlan
from sweeper.spec.overrides import calibration_spec, with_overrides
from sweeper.spec.schema import CategoricalDist, SweepSpec
from sweeper.spec.sections import IntUniformDist
from trainables.engines import train_module
from trainables.metrics import TRAIN_CPU_SHARE

# Without a logging handler set up (`sweep plan`, a spawned copy) Python prints
# bitsandbytes' import-time note about an optional CPU kernel package (`kernels`) to the
# terminal, in the middle of the forecast. Set here, at import, so that a spawned copy has
# it before its arguments' unpickling imports the libraries.
logging.getLogger("bitsandbytes").addHandler(logging.NullHandler())

__all__ = ["Calibration", "calibrate", "costliest_overrides", "run_training", "side_by_side", "mean_timing", "COST_PARAMETERS"]

# Steps in a row, as a trial trains between evaluations, so that copies side by side
# step while the others step (one step per evaluation, a copy's steps mostly met the
# others' evaluations and model loads instead).
MEASURED_STEPS = 5
# Micro-batches a measured step accumulates at most; a step of more is timed at this many
# and scaled (a step's time is its micro-batches', the optimizer's update a small part):
# `training.gradient_accumulation_steps: 100000` kept a calibration of 10 such steps
# going for hours.
MEASURED_MICRO_BATCHES = 8
# How long a copy waits at the start barrier for the others' imports and model loads.
BARRIER_SECONDS = 300

# Searched parameters whose higher values make a step dearer.
COST_PARAMETERS = ("lora.r", "training.per_device_batch_size", "training.gradient_accumulation_steps")


@dataclass(frozen=True)
class Calibration:
    first: TrialTiming  # the YAML's own configuration
    costliest: TrialTiming  # the dearest configuration of the space (same as first if none)
    seconds: float  # how long calibrating took
    copies: int = 1  # calibrations run side by side (their mean is `first` and `costliest`)
    per_copy: list[tuple[TrialTiming, TrialTiming]] = field(default_factory=list)  # each copy's (first, costliest)


def side_by_side(plan: SweepPlan, cluster: ClusterResources) -> int:
    """How many workers the sweep runs at once on its fullest node: the trials at once
    times their workers, at most as many workers as fit on the largest node (by CPUs,
    and by GPUs for a GPU sweep). Calibration runs this many copies at once."""
    return side_by_side_workers(plan.trial_resources, plan.concurrent_trials, cluster)


def side_by_side_workers(trial, concurrent_trials: int, cluster: ClusterResources) -> int:
    workers = concurrent_trials * trial.workers
    per_node = math.floor(cluster.max_node_cpus / trial.cpus_per_worker + 1e-9) if trial.cpus_per_worker else workers
    if trial.gpus_per_worker:
        per_node = min(per_node, math.floor(cluster.max_node_gpus / trial.gpus_per_worker + 1e-9))
    return max(1, min(workers, per_node))


def mean_timing(timings: list[TrialTiming]) -> TrialTiming:
    """The mean of copies' timings (the copies ran side by side, each a neighbour of the
    others as the sweep's trials are)."""
    return TrialTiming(
        step_seconds=statistics.fmean(t.step_seconds for t in timings),
        eval_seconds=statistics.fmean(t.eval_seconds for t in timings),
        setup_seconds=statistics.fmean(t.setup_seconds for t in timings),
        source=timings[0].source,
        cpu_share=statistics.fmean(shares) if (shares := [t.cpu_share for t in timings if t.cpu_share]) else None,
    )


def run_training(spec: SweepSpec, data: dict, model_source: str, report, started_at: float) -> None:
    """The one call into a task's training loop (trainables/<task>.py::train, or the
    engine's of trainer trl or function: trainables/engines.py::train_module), with the
    trial's config as a trial gets it (in a process group of one under deepspeed and fsdp),
    on as many torch threads as a trial's worker has CPUs."""
    task = importlib.import_module(train_module(spec.trainer, spec.task))
    with process_group_of_one(spec.resources.strategy), torch_threads(max(1, int(spec.resources.cpus_per_worker))):
        task.train(spec.trial_config(), data, model_source, report=report, started_at=started_at)


@contextlib.contextmanager
def torch_threads(count: int):
    """torch's intra-op threads set to `count` while the block runs, then as they were."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def process_group_of_one(strategy: str):
    """This process as a process group of one while the block runs, for the
    strategies that only step inside a group (DeepSpeed's engine, FSDP's fully_shard; a
    trial's workers get theirs from Ray Train). Nothing for ddp.

    The group is made once and kept for the process's life: DeepSpeed caches the groups
    it derives from the first one, and a second engine over a re-made group fails."""
    import torch
    import torch.distributed as dist

    if strategy == "ddp":
        yield
        return
    if not dist.is_initialized():
        # As a trial's workers: NCCL where the calibration has a GPU (a Ray task on a GPU node).
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    # DeepSpeed's engine insists on LOCAL_RANK, which a launcher (Ray Train) sets.
    local_rank = os.environ.get("LOCAL_RANK")
    os.environ["LOCAL_RANK"] = "0"
    try:
        yield
    finally:
        if local_rank is None:
            os.environ.pop("LOCAL_RANK", None)
        else:
            os.environ["LOCAL_RANK"] = local_rank


def costliest_overrides(spec: SweepSpec) -> dict:
    """The highest value of each searched cost parameter (categorical: the largest number)."""
    overrides = {}
    for path in COST_PARAMETERS:
        dist = spec.search.parameters.get(path)
        if isinstance(dist, CategoricalDist):
            numbers = [v for v in dist.values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if numbers:
                overrides[path] = max(numbers)
        elif isinstance(dist, IntUniformDist):
            overrides[path] = dist.high - (dist.high - dist.low) % dist.step
    return overrides


def measure(spec: SweepSpec, data: dict, model_source: str, steps: int = MEASURED_STEPS, ready=None) -> TrialTiming:
    """Train `spec` here for two intervals of `steps` steps, evaluating after each, and
    time the second: its steps (the loop's own training time) and the rest of the time
    between the two reports (evaluation, checkpoint, report). The first interval warms up;
    what its first step takes beyond a steady one is part of every trial run's start.
    `ready()` (copies side by side) waits for the other copies before the measured
    interval: their model loads take different times, and 5 steps are over in a
    fraction of a second, so copies started together need not step together."""
    accumulation = spec.training.gradient_accumulation_steps
    measured_accumulation = min(accumulation, MEASURED_MICRO_BATCHES)
    spec = calibration_spec(spec, steps, measured_accumulation)
    reports: list[tuple[float, dict]] = []

    def on_report(metrics: dict) -> None:
        if not reports and ready is not None:
            ready()  # the loop's step timer starts again after this report
        reports.append((time.time(), metrics))

    started_at = time.time()
    run_training(spec, data, model_source, lambda metrics, _: on_report(metrics), started_at)
    (warm_at, _), (measured_at, measured) = reports
    training = measured["train_tokens"] / measured["tokens_per_second"]
    measured_step = training / steps
    # setup_seconds runs to the end of the first step: its steady part is a step's.
    loop_setup = reports[0][1]["setup_seconds"] - measured_step
    return TrialTiming(
        step_seconds=measured_step * accumulation / measured_accumulation,
        eval_seconds=max(0.0, measured_at - warm_at - training),
        setup_seconds=max(0.0, loop_setup) + RAY_TRIAL_START_SECONDS,
        source="",
        cpu_share=measured.get(TRAIN_CPU_SHARE),
    )


def first_workers_data(data: dict, workers_per_trial: int) -> dict:
    """The data as a trial's first worker uses it: each of a trial's workers evaluates its
    own share of the eval split (`shard_batches`), so a copy timing one worker of several
    evaluates that share, not the whole split. Its training steps take micro-batches of the
    same size either way."""
    if workers_per_trial <= 1:
        return data
    import torch

    from trainables.common import Workers, shard_batches

    first_worker = Workers(rank=0, world_size=workers_per_trial, device=torch.device("cpu"))
    share = [index for batch in shard_batches(len(data["eval"]), 1, first_worker) for index in batch]
    return {**data, "eval": data["eval"].rows(share)}


def _calibrate_here(
    spec_json: dict, data, model_source: str, overrides: dict, ready=None
) -> tuple[TrialTiming, TrialTiming]:
    """Import, wait at `ready()` for the other copies (None: alone), then measure."""
    import warnings

    from transformers.utils import logging as transformers_logging

    spec = SweepSpec.model_validate(spec_json, context={"check_files": False})
    # The plan's output is the forecast: no weight-loading bars or library deprecation notes.
    transformers_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            _import_what_a_trial_has_imported(spec, model_source)
            if ready is not None:
                ready()  # model loads (the start's figure) side by side too
            first = measure(spec, data, model_source, ready=ready)
            costliest = first
            if overrides:
                costliest_spec = with_overrides(spec, overrides, built="the calibration run of the costliest config")
                costliest = measure(costliest_spec, data, model_source, ready=ready)
    finally:
        transformers_logging.enable_progress_bar()
    return first, costliest


def _import_what_a_trial_has_imported(spec: SweepSpec, model_source: str) -> None:
    """A trial's worker starts with the libraries imported (warm start, reused actors), so
    the measured setup must not include first imports: the task's loop (trl for DPO),
    peft and the model's class, which transformers imports on first use."""
    importlib.import_module(f"trainables.{spec.task}")
    import peft  # noqa: F401
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig

    from trainables.models import adapter_base, from_cache_first

    config = from_cache_first(AutoConfig.from_pretrained, adapter_base(model_source) or model_source)
    MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)


def calibrate(spec: SweepSpec, data: dict, model_source: str, on_cluster: bool, copies: int = 1) -> Calibration:
    """Time the first and the costliest configuration, `copies` calibrations side by side
    (`side_by_side`). `on_cluster`: as Ray tasks with one worker's resources each, packed
    on one node (Ray initialised); else in this process and `copies - 1` child processes."""
    started = time.time()
    overrides = costliest_overrides(spec)
    spec_json = spec.model_dump(mode="json")
    copies = max(1, copies)
    threads = max(1, int(spec.resources.cpus_per_worker))
    data = first_workers_data(data, spec.resources.workers_per_trial)
    if on_cluster:
        timings = _calibrate_as_ray_tasks(spec, spec_json, data, model_source, overrides, copies)
        where = "a Ray task with one worker's resources on the cluster"
        if copies > 1:
            where = "Ray tasks with one worker's resources each, on one node of the cluster"
    elif copies == 1:
        timings = [_calibrate_here(spec_json, data, model_source, overrides)]
        where = f"this process, {threads} thread(s)"
    else:
        timings = _calibrate_in_processes(spec_json, data, model_source, overrides, copies)
        where = f"this process and {copies - 1} other(s), {threads} thread(s) each"
    first = mean_timing([f for f, _ in timings])
    costliest = mean_timing([c for _, c in timings])
    what = f"measured: {MEASURED_STEPS} steps in a row after {MEASURED_STEPS} warm-up"
    what += f", {copies} copies side by side (as the sweep's workers run at once), in {where}" if copies > 1 else f" in {where}"
    if spec.resources.workers_per_trial > 1:
        what += (
            f"; a copy is one worker of {spec.resources.workers_per_trial}, evaluating that worker's share of the eval"
            " split (the workers' communication not included)"
        )
    costly = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "the first config"
    return Calibration(
        replace(first, source=f"{what}; first config"),
        replace(costliest, source=f"{what}; costliest: {costly}"),
        time.time() - started,
        copies,
        timings,
    )


def _calibrate_in_processes(spec_json, data, model_source, overrides, copies) -> list[tuple[TrialTiming, TrialTiming]]:
    """This process and `copies - 1` spawned ones (a fork of a process with torch's
    threads can hang), all measuring from one barrier on."""
    import multiprocessing

    from sweeper.errors import UserError

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(copies, timeout=BARRIER_SECONDS)
    results = context.Queue()
    copy_args = (spec_json, data, model_source, overrides, barrier, results, os.getpid())
    others = [context.Process(target=_calibrate_copy, args=copy_args, daemon=True) for _ in range(copies - 1)]
    for process in others:
        process.start()
    try:
        timings = [_calibrate_here(spec_json, data, model_source, overrides, barrier.wait)]
        for _ in others:
            outcome = results.get(timeout=BARRIER_SECONDS)
            if isinstance(outcome, str):
                raise UserError(f"calibration: a copy beside the first failed: {outcome}")
            timings.append(outcome)
    finally:
        barrier.abort()  # a copy still waiting (this process failed first) stops waiting
        for process in others:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    return timings


def _calibrate_copy(spec_json, data, model_source, overrides, barrier, results, parent_pid: int) -> None:
    """A spawned copy: its timings, or its error in words, on the queue."""
    _exit_with(parent_pid)
    try:
        results.put(_calibrate_here(spec_json, data, model_source, overrides, barrier.wait))
    except BaseException as error:  # the parent reports it; a traceback here would interleave
        results.put(f"{type(error).__name__}: {error}")


def _exit_with(parent_pid: int) -> None:
    """End this copy when the process that spawned it is gone. Killed by a signal that
    runs no `finally` (SIGTERM, SIGKILL), `sweep plan` left its copies training on, each a
    core's worth, for as long as their steps took: two of them ran almost two hours here."""
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _calibrate_as_ray_tasks(spec, spec_json, data, model_source, overrides, copies) -> list[tuple[TrialTiming, TrialTiming]]:
    """`copies` Ray tasks in one placement group packed on one node (contention is a
    node's), each with one worker's resources, meeting at a barrier actor."""
    import threading

    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    resources = spec.resources
    bundle = {"CPU": resources.cpus_per_worker, **({"GPU": resources.gpus_per_worker} if resources.gpus_per_worker else {})}
    group = placement_group([bundle] * copies, strategy="STRICT_PACK")
    try:
        ray.get(group.ready(), timeout=BARRIER_SECONDS)

        @ray.remote(num_cpus=0, max_concurrency=copies)
        class Barrier:
            def __init__(self):
                self.barrier = threading.Barrier(copies, timeout=BARRIER_SECONDS)

            def wait(self):
                self.barrier.wait()

        barrier = Barrier.remote()
        task = ray.remote(num_cpus=resources.cpus_per_worker, num_gpus=resources.gpus_per_worker or 0)(_calibrate_on_ray)
        runs = [
            task.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
            ).remote(spec_json, data, model_source, overrides, barrier)
            for index in range(copies)
        ]
        return ray.get(runs)
    finally:
        remove_placement_group(group)


def _calibrate_on_ray(spec_json, data, model_source, overrides, barrier) -> tuple[TrialTiming, TrialTiming]:
    import ray

    return _calibrate_here(spec_json, data, model_source, overrides, lambda: ray.get(barrier.wait.remote()))
