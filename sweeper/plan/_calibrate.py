"""Calibration: a trial's step and evaluation time measured where the sweep's trials run.

A few optimizer steps (`MEASURED_STEPS` to warm up, then as many measured, each interval
followed by an evaluation) of two configurations: the first (the YAML's own values) and
the costliest one in the space (the highest value of every searched parameter that makes
a step dearer: LoRA rank, batch size, gradient accumulation; among searched trl methods,
one with a reference model). One run gives seconds per step (the loop's own training
time: its `train_seconds`, or `train_tokens / tokens_per_second`), seconds per evaluation
(the rest of the time between two reports: evaluation, checkpoint, report) and the
loop's setup.

Each configuration is measured in a Ray task that holds one trial worker's resources
(`resources.cpus_per_worker`, `gpus_per_worker`), so a GPU sweep is timed on a GPU of
its cluster, one copy per GPU, and the driver never trains or touches CUDA. The two tasks
run side by side where the cluster has room for both, as the sweep's trials do.
The training loop is called through `run_training` alone.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from dataclasses import dataclass, replace

from sweeper.cost import RAY_TRIAL_START_SECONDS, TrialTiming
from sweeper.spec import calibration_spec, with_overrides, CategoricalDist, SweepSpec, IntUniformDist
from trainables.engines import train_module
from trainables.metrics import TOKENS_PER_SECOND, TRAIN_SECONDS, TRAIN_TOKENS

# Without a logging handler set up, Python prints bitsandbytes' import-time note about an
# optional CPU kernel package to the terminal; set at import, before a task's unpickling
# imports the libraries.
logging.getLogger("bitsandbytes").addHandler(logging.NullHandler())

__all__ = ["Calibration", "calibrate", "costliest_overrides", "run_training", "measure", "COST_PARAMETERS"]

# Steps in each of the two intervals (warm-up, measured). The live forecast replaces the
# calibrated figures by the sweep's own from its first evaluations.
MEASURED_STEPS = 5
# Micro-batches a measured step accumulates at most; a step of more is timed at this many
# and scaled (a step's time is its micro-batches', the optimizer's update a small part).
MEASURED_MICRO_BATCHES = 8

# Searched parameters whose higher values make a step dearer.
COST_PARAMETERS = ("lora.r", "training.per_device_batch_size", "training.gradient_accumulation_steps")


@dataclass(frozen=True)
class Calibration:
    first: TrialTiming  # the YAML's own configuration
    costliest: TrialTiming  # the dearest configuration of the space (the first if none)
    seconds: float  # how long calibrating took
    worker_pids: tuple[int, ...] = ()  # the Ray workers' processes that measured


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


# trl methods whose step also runs a reference model (trl.method searched: the dearer ones).
REFERENCE_METHODS = ("dpo", "kto")


def costliest_overrides(spec: SweepSpec) -> dict:
    """The highest value of each searched cost parameter (categorical: the largest number),
    and a searched trl.method with a reference model where one is among its values."""
    overrides = {}
    methods = spec.search.parameters.get("trl.method")
    if isinstance(methods, CategoricalDist) and spec.trl is not None and spec.trl.method not in REFERENCE_METHODS:
        dearer = [m for m in methods.values if m in REFERENCE_METHODS]
        if dearer:
            overrides["trl.method"] = dearer[0]
    for path in COST_PARAMETERS:
        dist = spec.search.parameters.get(path)
        if isinstance(dist, CategoricalDist):
            numbers = [v for v in dist.values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if numbers:
                overrides[path] = max(numbers)
        elif isinstance(dist, IntUniformDist):
            overrides[path] = dist.high - (dist.high - dist.low) % dist.step
    return overrides


def measure(spec: SweepSpec, data: dict, model_source: str, steps: int = MEASURED_STEPS) -> TrialTiming:
    """Train `spec` in this process for two intervals of `steps` steps, evaluating after
    each, and time the second: its steps (the loop's own training time) and the rest of
    the time between the two reports (evaluation, checkpoint, report). The first interval
    warms up; what its first step takes beyond a steady one is part of every run's start."""
    accumulation = spec.training.gradient_accumulation_steps
    measured_accumulation = min(accumulation, MEASURED_MICRO_BATCHES)
    spec = calibration_spec(spec, steps, measured_accumulation)
    # Timed without the generation sample: its last step would be the calibration's
    # max_steps, and its answers would count as every evaluation's time. The forecast
    # leaves generation out.
    data = {key: value for key, value in data.items() if key != "generation"}
    reports: list[tuple[float, dict]] = []

    started_at = time.time()
    run_training(spec, data, model_source, lambda metrics, _: reports.append((time.time(), metrics)), started_at)
    (warm_at, _), (measured_at, measured) = reports
    # The loop's own training time: as it reports it, or from its tokens and their rate.
    training = measured.get(TRAIN_SECONDS) or measured[TRAIN_TOKENS] / measured[TOKENS_PER_SECOND]
    measured_step = training / steps
    # setup_seconds runs to the end of the first step: its steady part is a step's.
    loop_setup = reports[0][1]["setup_seconds"] - measured_step
    return TrialTiming(
        step_seconds=measured_step * accumulation / measured_accumulation,
        eval_seconds=max(0.0, measured_at - warm_at - training),
        setup_seconds=max(0.0, loop_setup) + RAY_TRIAL_START_SECONDS,
        source="calibrated",
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


def _import_what_a_trial_has_imported(spec: SweepSpec, model_source: str) -> None:
    """What a trial's worker imports before its loop's setup is timed: the task's loop
    (trl for DPO), peft and the model's class, which transformers imports on first use.
    Timed apart from the loop's setup (`_measure_in_task`)."""
    importlib.import_module(f"trainables.{spec.task}")
    import peft  # noqa: F401
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig

    from trainables.models import adapter_base, from_cache_first

    config = from_cache_first(AutoConfig.from_pretrained, adapter_base(model_source) or model_source)
    MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)


def _measure_in_task(spec_json: dict, data: dict, model_source: str) -> tuple[TrialTiming, int]:
    """A Ray task's body: the libraries a trial's Train worker imports, then `measure`.
    Each Train run's workers are new processes that import them again, so the time they
    take here (the task's process is new as well: nothing heavy is imported before this
    body runs) is added to the measured start of a run."""
    import warnings

    imports_started = time.time()
    import ray.train.torch  # noqa: F401  (torch, and what a Train worker imports at its start)
    from transformers.utils import logging as transformers_logging

    spec = SweepSpec.model_validate(spec_json, context={"check_files": False})
    transformers_logging.disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        _import_what_a_trial_has_imported(spec, model_source)
        imports = time.time() - imports_started
        timing = measure(spec, data, model_source)
    return replace(timing, setup_seconds=timing.setup_seconds + imports), os.getpid()


def calibrate(spec: SweepSpec, data: dict, model_source: str) -> Calibration:
    """Time the first and the costliest configuration, each in a Ray task with one trial
    worker's resources (Ray initialised: a local cluster or one joined)."""
    import ray

    started = time.time()
    overrides = costliest_overrides(spec)
    resources = spec.resources
    data_ref = ray.put(first_workers_data(data, resources.workers_per_trial))
    task = ray.remote(num_cpus=resources.cpus_per_worker, num_gpus=resources.gpus_per_worker or 0, max_retries=0)(
        _measure_in_task
    )
    specs = [spec]
    if overrides:
        specs.append(with_overrides(spec, overrides, built="the calibration run of the costliest config"))
    try:
        results = ray.get([task.remote(s.model_dump(mode="json"), data_ref, model_source) for s in specs])
    except ray.exceptions.RayTaskError as error:
        # The loop's own error (an input error is one keyed line), not the task's wrapper.
        raise (error.cause if isinstance(error.cause, Exception) else error) from None
    where = f"{MEASURED_STEPS} steps after {MEASURED_STEPS} warm-up, in a Ray task with one worker's resources"
    if resources.workers_per_trial > 1:
        where += f" (one worker of {resources.workers_per_trial}; their communication not included)"
    costly = ", ".join(f"{k}={v}" for k, v in overrides.items())
    first = replace(results[0][0], source=f"calibrated: {where}")
    costliest = replace(results[-1][0], source=f"calibrated ({costly or 'the first config'}): {where}")
    return Calibration(first, costliest, time.time() - started, tuple(pid for _, pid in results))
