"""Calibration: measure a trial's step time on the target hardware before the sweep.

A few optimizer steps (one warm-up, then `steps` measured) of two configurations: the
first (the YAML's own values) and the most expensive one in the space (the highest value
of every searched parameter that makes a step dearer: LoRA rank, batch size, gradient
accumulation). Each step evaluates, so one run gives both seconds per step (the loop's
own training-time measure, `train_tokens / tokens_per_second`) and seconds per
evaluation (the rest of the time between two reports: evaluation, adapter checkpoint,
report).

Where it runs: in this process for a local CPU cluster (one thread per reserved CPU, as a
trial's worker; on the 2-core machine this gives the step time of a trial's worker within
the noise, benchmarks/README.md), else as a Ray task with one worker's resources on the
cluster, so that a GPU sweep is measured on a GPU of the cluster.

The training loop is called through `run_training` alone.
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import time
from dataclasses import dataclass, replace

from sweeper.forecast import RAY_TRIAL_START_SECONDS, TrialTiming
from sweeper.spec import CategoricalDist, IntUniformDist, SweepSpec, with_overrides

__all__ = ["Calibration", "calibrate", "costliest_overrides", "run_training", "COST_PARAMETERS"]

WARMUP_STEPS = 1
MEASURED_STEPS = 3

# Searched parameters whose higher values make a step dearer.
COST_PARAMETERS = ("lora.r", "training.per_device_batch_size", "training.gradient_accumulation_steps")


@dataclass(frozen=True)
class Calibration:
    first: TrialTiming  # the YAML's own configuration
    costliest: TrialTiming  # the dearest configuration of the space (same as first if none)
    seconds: float  # how long calibrating took


def run_training(spec: SweepSpec, data: dict, model_source: str, report, started_at: float) -> None:
    """The one call into a task's training loop (trainables/<task>.py::train), with the
    trial's config as a trial gets it (in a process group of one under deepspeed and fsdp)."""
    task = importlib.import_module(f"trainables.{spec.task}")
    with process_group_of_one(spec.resources.strategy):
        task.train(spec.trial_config(), data, model_source, report=report, started_at=started_at)


@contextlib.contextmanager
def process_group_of_one(strategy: str):
    """This process as a process group of one while the block runs, for the
    strategies that only step inside a group (DeepSpeed's engine, FSDP's fully_shard; a
    trial's workers get theirs from Ray Train). Nothing for ddp.

    The group is made once and kept for the process's life: DeepSpeed caches the groups
    it derives from the first one, and a second engine over a re-made group fails."""
    import os

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


def measure(spec: SweepSpec, data: dict, model_source: str, steps: int = MEASURED_STEPS) -> TrialTiming:
    """Train `spec` for warm-up + `steps` steps here, evaluating after each, and time it."""
    import torch

    spec = with_overrides(
        spec,
        {
            "training.max_steps": WARMUP_STEPS + steps,
            "training.eval_every": 1,
            "early_stopping.scheduler": "none",
            "chaos.fault": "none",
            "budget": None,
        },
    )
    reports: list[tuple[float, dict]] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(spec.resources.cpus_per_worker)))
    started_at = time.time()
    try:
        run_training(spec, data, model_source, lambda metrics, _: reports.append((time.time(), metrics)), started_at)
    finally:
        torch.set_num_threads(threads)
    step_times = [m["train_tokens"] / m["tokens_per_second"] for _, m in reports]
    measured = step_times[WARMUP_STEPS:]
    gaps = [later - earlier for (earlier, _), (later, _) in zip(reports, reports[1:])]
    eval_times = [max(0.0, gap - step) for gap, step in zip(gaps, step_times[1:])]
    loop_setup = reports[0][1]["setup_seconds"] - step_times[0]
    return TrialTiming(
        step_seconds=statistics.median(measured),
        eval_seconds=statistics.median(eval_times),
        setup_seconds=max(0.0, loop_setup) + RAY_TRIAL_START_SECONDS,
        source="",
    )


def _calibrate_here(spec_json: dict, data, model_source: str, overrides: dict) -> tuple[TrialTiming, TrialTiming]:
    import warnings

    from transformers.utils import logging as transformers_logging

    spec = SweepSpec.model_validate(spec_json, context={"check_files": False})
    # The plan's output is the forecast: no weight-loading bars or library deprecation notes.
    transformers_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            _import_what_a_trial_has_imported(spec, model_source)
            first = measure(spec, data, model_source)
            costliest = measure(with_overrides(spec, overrides), data, model_source) if overrides else first
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

    from trainables.models import adapter_base

    config = AutoConfig.from_pretrained(adapter_base(model_source) or model_source)
    MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)


def calibrate(spec: SweepSpec, data: dict, model_source: str, on_cluster: bool) -> Calibration:
    """Time the first and the costliest configuration. `on_cluster`: as a Ray task with one
    worker's resources (Ray initialised); else in this process."""
    started = time.time()
    overrides = costliest_overrides(spec)
    spec_json = spec.model_dump(mode="json")
    if on_cluster:
        import ray

        resources = spec.resources
        task = ray.remote(num_cpus=resources.cpus_per_worker, num_gpus=resources.gpus_per_worker or 0)(_calibrate_here)
        first, costliest = ray.get(task.remote(spec_json, data, model_source, overrides))
        where = "a Ray task with one worker's resources on the cluster"
    else:
        first, costliest = _calibrate_here(spec_json, data, model_source, overrides)
        where = f"this process, {max(1, int(spec.resources.cpus_per_worker))} thread(s)"
    what = f"measured: {MEASURED_STEPS} steps after {WARMUP_STEPS} warm-up in {where}"
    if spec.resources.workers_per_trial > 1:
        what += f"; one worker of {spec.resources.workers_per_trial} (the workers' communication not included)"
    costly = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "the first config"
    return Calibration(
        replace(first, source=f"{what}; first config"),
        replace(costliest, source=f"{what}; costliest: {costly}"),
        time.time() - started,
    )
