"""What a trial's worker runs (a Ray Train worker, or the trial's own process in Ray
Train's local mode): read the trial's config, fetch the tokenized data from the object
store, and hand over to the task's training loop (trainables/<task>.py) or to
the sweep's engine (trainer: trl or function, trainables/engines.py)."""

from __future__ import annotations

import contextlib
import importlib
import time

import psutil
import ray
import ray.train
import ray.train.torch
import torch

from trainables.common import checkpoint_report, final_report_of, this_device
from trainables.config import TrialConfig
from trainables.engines import train_module
from trainables.metrics import SETUP_PHASES
from trainables.models import resolve_model_source
from trainables.preemption import moves_of, train_notice


# Trials this process has run before the current one: Tune reuses a one-worker trial's
# process (Ray Train's local mode, sweeper/run/_trial.py), which imports torch once.
_trials_run_here = 0


def train_loop_per_worker(config: dict) -> None:
    """The loop of one worker. `config`: "trial", the TrialConfig with this trial's
    sampled values applied; "data", {"ref": object ref of the tokenized splits};
    "cache_root", where built-in models are built; "started_at", when the trial started;
    "memory_forecast_gib", the trial's memory forecast (None where there is none);
    "session", where reports and checkpoints go (sweeper/run/_trial.py's TrialStorage for
    a loop in Tune's trial process; absent in a Ray Train worker: Ray Train's own)."""
    global _trials_run_here
    started_at = config["started_at"]
    # Where a trial's setup time goes, in seconds since the trial started; the first
    # report carries it (benchmarks/overhead.py prints it). A Train worker's process is
    # started for its trial; Tune's reused trial process was started before it.
    setup_phases = {"train_loop_entered": time.time() - started_at, "trials_before_in_process": _trials_run_here}
    process_started = psutil.Process().create_time() - started_at
    if process_started > 0:
        setup_phases["worker_process_started"] = process_started
    _trials_run_here += 1
    session = config.get("session") or RayTrainSession()
    trial: TrialConfig = config["trial"]
    # One intra-op thread per reserved CPU: two trials on two cores must not fight.
    torch.set_num_threads(max(1, int(trial.resources.cpus_per_worker)))
    if trial.resources.use_gpu:
        # The GPU Ray assigned this worker (not LOCAL_RANK: workers of several trials
        # sharing one GPU through a fractional gpus_per_worker all have local rank 0,
        # and Ray's visible-device list is not ordered by local rank).
        torch.cuda.set_device(this_device())
    data = ray.get(config["data"]["ref"])
    model_source = resolve_model_source(trial.model.name_or_path, config["cache_root"])
    task = importlib.import_module(train_module(trial.trainer, trial.task))  # the loop, or the trainer: engine
    setup_phases["data_and_task_ready"] = time.time() - started_at
    report = _FirstReportWithSetup(session.report, setup_phases)
    forecast = config.get("memory_forecast_gib")
    # Set when a failed trial is retried, or a resumed sweep or a promoted trial goes on:
    # the trial's latest checkpoint.
    with session.latest_checkpoint() as resume_from:
        if resume_from is None:
            task.train(
                trial, data, model_source, report=report, started_at=started_at, memory_forecast_gib=forecast,
                preemption=session.preemption_notice(None),
            )
            return
        final = final_report_of(resume_from, trial.training.max_steps)
        if final is not None:  # nothing left to train: tell the driver how it ended
            report(final, resume_from if session.world_rank == 0 else None)
            return
        last = checkpoint_report(resume_from)
        if last is not None:
            # Said again before training on: a driver stopped or killed between this
            # checkpoint reaching storage and its report reaching the driver never
            # recorded that evaluation, and the rungs would rank the trial by its next one.
            # The driver, the search and the rungs each take a step's report once, so
            # where it was recorded (a promoted trial goes on from its rung) it changes
            # nothing. No checkpoint: it is the one this run starts from.
            session.report(last, None)
        task.train(
            trial, data, model_source, report=report, started_at=started_at, resume_from=resume_from,
            memory_forecast_gib=forecast, preemption=session.preemption_notice(moves_of(resume_from)),
        )


class RayTrainSession:
    """Reports and checkpoints of a Ray Train worker: through Ray Train, which persists
    each checkpoint in the run's storage and hands a retried run its latest one."""

    @property
    def world_rank(self) -> int:
        return ray.train.get_context().get_world_rank()

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint)

    @contextlib.contextmanager
    def latest_checkpoint(self):
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            yield None
            return
        with checkpoint.as_directory() as folder:
            yield folder

    def preemption_notice(self, moves: dict | None):
        return train_notice(moves)


class _FirstReportWithSetup:
    """`report(metrics, checkpoint_dir)` for the training loops; the first report also
    carries the setup phases."""

    def __init__(self, report, setup_phases: dict[str, float]):
        self.report = report
        self.setup_phases: dict[str, float] | None = setup_phases

    def __call__(self, metrics: dict, checkpoint_dir: str | None) -> None:
        if self.setup_phases is not None:
            metrics = {**metrics, SETUP_PHASES: self.setup_phases}
            self.setup_phases = None
        self.report(metrics, checkpoint_dir)
