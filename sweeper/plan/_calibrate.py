"""Calibration: the costliest config's step, evaluation and generation time measured where
the sweep's trials run, in a Ray task that holds one trial worker's resources
(`resources.cpus_per_worker`, `gpus_per_worker`): a GPU sweep is timed on a GPU of its
cluster, and the driver never trains or touches CUDA. The costliest config takes the
highest value of every searched parameter that makes a step dearer (LoRA rank, batch size,
gradient accumulation; among searched trl methods, one with a reference model). The
training loop is called through `run_training`.

Its cost is bounded by the sweep's own figures: CALIBRATION_STEPS steps and one evaluation
(on data.eval_samples' rows where set), with one generation pass; where Tune reuses trial
processes, one more step in the same process, evaluated on one row, times a later trial's
start.

A GRPO step (trl.method grpo) is timed as it is: its rollouts, scoring and training, at the
costliest group size and completion length searched; the timed steps span whole cycles of
sampling where a generation batch serves several steps (`calibration_steps`), and a step
timed at fewer micro-batches still holds whole groups of completions (`measured_micro_batches`).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import time
from dataclasses import dataclass, replace

from sweeper.cost import RAY_TRIAL_START_SECONDS, REUSED_TRIAL_START_SECONDS, TrialTiming
from sweeper.spec import (calibration_spec, grpo_costliest, grpo_generation_batch, is_grpo, searched_distributions,
                          with_overrides, CategoricalDist, SweepSpec, IntUniformDist)
from trainables.engines import train_module
from trainables.metrics import (
    FIRST_STEP_SECONDS, GENERATION_SECONDS, SETUP_SECONDS, TOKENS_PER_SECOND, TRAIN_SECONDS, TRAIN_TOKENS,
)

__all__ = ["Calibration", "calibrate", "costliest_overrides", "run_training", "measure", "measure_start",
           "COST_PARAMETERS", "calibration_steps", "measured_micro_batches"]

# Steps of the calibration run, evaluated once after the last: the first (whose own time
# the loop reports) warms up, the others are timed.
CALIBRATION_STEPS = 4
# Micro-batches a measured step accumulates at most; a step of more is timed at this many
# and scaled (a step's time is its micro-batches', the optimizer's update a small part).
MEASURED_MICRO_BATCHES = 8

# Searched parameters whose higher values make a step or an evaluation dearer: GRPO's
# completions are decoded token by token, and each evaluation samples a group of
# trl.num_generations_eval (default trl.num_generations) for each eval prompt.
COST_PARAMETERS = ("lora.r", "training.per_device_batch_size", "training.gradient_accumulation_steps",
                   "trl.num_generations", "trl.num_generations_eval", "trl.max_completion_length")
# trl methods whose step also runs a reference model.
REFERENCE_METHODS = ("dpo", "kto")


@dataclass(frozen=True)
class Calibration:
    timing: TrialTiming  # the costliest config's
    seconds: float  # how long calibrating took
    worker_pid: int  # the Ray worker's process that measured


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
    """The highest value of each searched cost parameter (categorical: the largest number;
    at the top level or in a conditional branch), and a searched trl.method with a reference model where one is among its values."""
    overrides = {}
    methods = spec.search.parameters.get("trl.method")
    if isinstance(methods, CategoricalDist) and spec.trl is not None and spec.trl.method not in REFERENCE_METHODS:
        dearer = [m for m in methods.values if m in REFERENCE_METHODS]
        if dearer:
            overrides["trl.method"] = dearer[0]
    for path in COST_PARAMETERS:
        highest = []  # of each distribution it is searched by (a conditional branch's too)
        for dist in searched_distributions(spec.search.parameters, path):
            if isinstance(dist, CategoricalDist):
                highest += [v for v in dist.values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            elif isinstance(dist, IntUniformDist):
                highest.append(dist.high - (dist.high - dist.low) % dist.step)
        if highest:
            overrides[path] = max(highest)
    return overrides


def measured_micro_batches(spec: SweepSpec) -> int:
    """Micro-batches a calibration step accumulates: the step's own, at most
    MEASURED_MICRO_BATCHES. A GRPO step samples its completions for its micro-batches (where
    trl.steps_per_generation and trl.generation_batch_size are unset), in whole groups of
    trl.num_generations on the one worker that calibrates: the count is rounded up to one
    whose completions hold whole groups (its time is scaled to the step's as any other)."""
    accumulation = spec.training.gradient_accumulation_steps
    measured = min(accumulation, MEASURED_MICRO_BATCHES)
    if not is_grpo(spec):
        return measured
    grpo = grpo_costliest(spec)
    if grpo["steps_per_generation"] is not None or grpo["generation_batch_size"] is not None:
        return measured
    micro = spec.training.per_device_batch_size
    whole_groups = grpo["num_generations"] // math.gcd(micro, grpo["num_generations"])
    return math.ceil(measured / whole_groups) * whole_groups


def calibration_steps(spec: SweepSpec, micro_batches: int) -> int:
    """Steps of a calibration run at `micro_batches` a step: CALIBRATION_STEPS, or for GRPO a
    warm-up step and whole cycles of sampling after it (at least CALIBRATION_STEPS - 1
    steps), where a generation batch serves several steps (trl.steps_per_generation or
    trl.generation_batch_size beyond a step's completions, or trl.num_iterations > 1): the
    warm-up step samples, and the timed steps sample as often as a trial's do."""
    if not is_grpo(spec):
        return CALIBRATION_STEPS
    grpo, micro = grpo_costliest(spec), spec.training.per_device_batch_size
    generation_batch = grpo_generation_batch(spec, grpo, micro_batches)
    cycle = max(1, math.ceil(generation_batch / (micro * micro_batches))) * grpo["num_iterations"]
    return 1 + cycle * math.ceil((CALIBRATION_STEPS - 1) / cycle)


def measure(
    spec: SweepSpec, data: dict, model_source: str, steps: int | None = None, started_at: float | None = None
) -> TrialTiming:
    """Train `spec` in this process for `steps` steps and one evaluation after the last,
    and time: a steady step (the loop's own training time less its first step's, over the
    other steps), the generation pass over the sweep's sample that the report runs (where
    `data` has one), and the rest of the time from the last step to the report
    (evaluation, checkpoint, report). The start runs from `started_at` (now when None) to
    the end of the first step, less a steady step's time (the loop's own: what Ray adds is
    the caller's to add). `steps`: `calibration_steps` where None."""
    accumulation = spec.training.gradient_accumulation_steps
    measured_accumulation = measured_micro_batches(spec)
    steps = calibration_steps(spec, measured_accumulation) if steps is None else steps
    spec = calibration_spec(spec, steps, measured_accumulation)
    if data.get("generation") is not None:  # one generation pass, at the report
        data = {**data, "generation": replace(data["generation"], steps=frozenset())}
    started_at = time.time() if started_at is None else started_at
    reported_at, report = _one_report(spec, data, model_source, started_at)
    training = report.get(TRAIN_SECONDS) or report[TRAIN_TOKENS] / report[TOKENS_PER_SECOND]
    later_steps = training - report[FIRST_STEP_SECONDS]
    step = later_steps / (steps - 1)
    generating = report.get(GENERATION_SECONDS, 0.0)
    trained_until = started_at + report[SETUP_SECONDS] + later_steps
    return TrialTiming(
        step_seconds=step * accumulation / measured_accumulation,
        eval_seconds=max(0.0, reported_at - trained_until - generating),
        setup_seconds=max(0.0, report[SETUP_SECONDS] - step),
        source="calibrated",
        generation_seconds=generating,
        generation_prompts=len(data["generation"].prompts) if generating else 0,
    )


def measure_start(spec: SweepSpec, data: dict, model_source: str, step_seconds: float) -> float:
    """The loop's start in this process (from now to the end of its first step, less a
    steady step: `step_seconds`, a whole step as `measure` gives it, at the micro-batches
    measured): one step of `spec`, its evaluation on one eval row, no generation."""
    accumulation = spec.training.gradient_accumulation_steps
    measured_accumulation = measured_micro_batches(spec)
    spec = calibration_spec(spec, 1, measured_accumulation)
    one_row = {key: value for key, value in data.items() if key != "generation"}
    one_row["eval"] = data["eval"].rows([0])
    if "eval_rows" in data:
        one_row["eval_rows"] = data["eval_rows"][:1]
    _, report = _one_report(spec, one_row, model_source, time.time())
    return max(0.0, report[SETUP_SECONDS] - step_seconds * measured_accumulation / accumulation)


def _one_report(spec: SweepSpec, data: dict, model_source: str, started_at: float) -> tuple[float, dict]:
    """When the calibration run's one report came, and its metrics."""
    reports: list[tuple[float, dict]] = []
    run_training(spec, data, model_source, lambda metrics, _: reports.append((time.time(), metrics)), started_at)
    (reported_at, report), = reports
    return reported_at, report


def _measure_in_task(spec_json: dict, data: dict, model_source: str) -> tuple[TrialTiming, int]:
    """A Ray task's body: `measure`, whose start counts from here, in a new process as a
    trial's is. Where trials have several workers, each start is new processes: the
    imports are part of every start. Where a trial has one worker, Tune reuses its process
    for the next trial: `measure_start` in the same process times the start later trials
    pay, and the first trial of a process pays what a new process's start does (Ray's
    placement and process, the imports): its surplus over a later start is paid once per
    trial process."""
    started_at = time.time()
    import warnings

    from transformers.utils import logging as transformers_logging

    spec = SweepSpec.model_validate(spec_json, context={"check_files": False})
    transformers_logging.disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        first = measure(spec, data, model_source, started_at=started_at)
        if not spec.resources.in_trial_process:
            return replace(first, setup_seconds=first.setup_seconds + RAY_TRIAL_START_SECONDS), os.getpid()
        later_start = measure_start(spec, data, model_source, first.step_seconds) + REUSED_TRIAL_START_SECONDS
    first_start = first.setup_seconds + RAY_TRIAL_START_SECONDS
    return replace(first, setup_seconds=later_start, process_start_seconds=max(0.0, first_start - later_start)), os.getpid()


def calibrate(spec: SweepSpec, data: dict, model_source: str) -> Calibration:
    """Time the costliest configuration in a Ray task with one trial worker's resources
    (Ray initialised: a local cluster or one joined). A trial of several workers
    evaluates a share of the eval split on each: the evaluation is that share's."""
    import ray

    started = time.time()
    overrides = costliest_overrides(spec)
    if overrides:
        spec = with_overrides(spec, overrides, built="the calibration run of the costliest config")
    resources = spec.resources
    task = ray.remote(num_cpus=resources.cpus_per_worker, num_gpus=resources.gpus_per_worker or 0, max_retries=0)(
        _measure_in_task
    )
    try:
        timing, pid = ray.get(task.remote(spec.model_dump(mode="json"), data, model_source))
    except ray.exceptions.RayTaskError as error:
        # The loop's own error (an input error is one keyed line), not the task's wrapper.
        raise (error.cause if isinstance(error.cause, Exception) else error) from None
    workers = resources.workers_per_trial
    config = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "the YAML's config"
    steps = calibration_steps(spec, measured_micro_batches(spec))
    source = f"calibrated at {config}: {steps - 1} steps after a warm-up step, one evaluation"
    source += " in a Ray task with one worker's resources"
    if workers > 1:
        source += f" (one worker of {workers}; their communication not included)"
    timing = replace(timing, eval_seconds=timing.eval_seconds / workers, source=source)
    return Calibration(timing, time.time() - started, pid)
