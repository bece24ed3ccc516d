"""What a Ray Train worker runs: read the trial's config, fetch the tokenized data from
the object store, and hand over to the task's training loop (trainables/<task>.py) or to
the sweep's engine (trainer: trl or function, trainables/engines.py)."""

from __future__ import annotations

import importlib
import time

import psutil
import ray
import ray.train
import ray.train.torch
import torch

from trainables.common import checkpoint_report, final_report_of
from trainables.config import TrialConfig
from trainables.engines import train_module
from trainables.metrics import PLACEMENT_GROUP, SETUP_PHASES
from trainables.models import resolve_model_source
from trainables.preemption import moves_of, train_notice


def train_loop_per_worker(config: dict) -> None:
    """Ray Train's loop of one worker. `config`: "trial", the TrialConfig with this trial's
    sampled values applied; "data", {"ref": object ref of the tokenized splits};
    "cache_root", where built-in models are built; "started_at", when the trial started;
    "memory_forecast_gib", the trial's memory forecast (None where there is none)."""
    started_at = config["started_at"]
    # Where a trial's setup time goes, in seconds since the trial started; the first
    # report carries it (benchmarks/overhead.py prints it).
    setup_phases = {
        "worker_process_started": psutil.Process().create_time() - started_at,
        "train_loop_entered": time.time() - started_at,
    }
    trial: TrialConfig = config["trial"]
    # One intra-op thread per reserved CPU: two trials on two cores must not fight.
    torch.set_num_threads(max(1, int(trial.resources.cpus_per_worker)))
    if trial.resources.use_gpu:
        # The GPU Ray assigned this worker (not LOCAL_RANK: workers of several trials
        # sharing one GPU through a fractional gpus_per_worker all have local rank 0,
        # and Ray's visible-device list is not ordered by local rank).
        torch.cuda.set_device(ray.train.torch.get_device())
    data = ray.get(config["data"]["ref"])
    model_source = resolve_model_source(trial.model.name_or_path, config["cache_root"])
    task = importlib.import_module(train_module(trial.trainer, trial.task))  # the loop, or the trainer: engine
    setup_phases["data_and_task_ready"] = time.time() - started_at
    report = _RayReport(setup_phases)
    forecast = config.get("memory_forecast_gib")
    # Set when Ray Train retries this trial after a failure, or when a resumed sweep
    # restarts it: the run's latest checkpoint.
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        task.train(
            trial, data, model_source, report=report, started_at=started_at, memory_forecast_gib=forecast,
            preemption=train_notice(),
        )
        return
    with checkpoint.as_directory() as resume_from:
        final = final_report_of(resume_from, trial.training.max_steps)
        if final is not None:  # nothing left to train: tell the driver how it ended
            report(final, resume_from if ray.train.get_context().get_world_rank() == 0 else None)
            return
        last = checkpoint_report(resume_from)
        if last is not None:
            # Said again before training on: a driver stopped or killed between this
            # checkpoint reaching storage and its report reaching the driver never
            # recorded that evaluation, and the rungs would rank the trial by its next one.
            # The driver, the search and the rungs each take a step's report once, so
            # where it was recorded (a promoted trial goes on from its rung) it changes
            # nothing. No checkpoint: it is the one this run starts from.
            ray.train.report(last)
        task.train(
            trial, data, model_source, report=report, started_at=started_at, resume_from=resume_from,
            memory_forecast_gib=forecast, preemption=train_notice(moves_of(resume_from)),
        )


class _RayReport:
    """`report(metrics, checkpoint_dir)` for the training loops, through Ray Train; the
    first report also carries the setup phases and the workers' placement group."""

    def __init__(self, setup_phases: dict[str, float]):
        self.setup_phases: dict[str, float] | None = setup_phases

    def __call__(self, metrics: dict, checkpoint_dir: str | None) -> None:
        if self.setup_phases is not None:
            placement_group = ray.util.get_current_placement_group()
            metrics = {**metrics, SETUP_PHASES: self.setup_phases}
            if placement_group is not None:
                metrics[PLACEMENT_GROUP] = placement_group.id.hex()
            self.setup_phases = None
        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint)
