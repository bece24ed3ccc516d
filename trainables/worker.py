"""What a Ray Train worker runs: read the trial's config, fetch the tokenized data from
the object store, and hand over to the task's training loop (trainables/<task>.py)."""

from __future__ import annotations

import importlib

import ray
import ray.train
import torch

from sweeper.spec import SweepSpec
from trainables.models import resolve_model_source


def train_loop_per_worker(config: dict) -> None:
    spec = SweepSpec.model_validate(config["spec"], context={"check_files": False})
    # One intra-op thread per reserved CPU: two trials on two cores must not fight.
    torch.set_num_threads(max(1, int(spec.resources.cpus_per_worker)))
    data = ray.get(config["data"]["ref"])
    model_source = resolve_model_source(spec.model.name_or_path, config["cache_root"])
    task = importlib.import_module(f"trainables.{spec.task}")
    # Set when Ray Train retries this trial after a failure, or when a resumed sweep
    # restarts it: the run's latest checkpoint.
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        task.train(spec, data, model_source, report=_report_to_ray, started_at=config["started_at"])
        return
    with checkpoint.as_directory() as resume_from:
        task.train(spec, data, model_source, report=_report_to_ray, started_at=config["started_at"], resume_from=resume_from)


def _report_to_ray(metrics: dict, checkpoint_dir: str | None) -> None:
    checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
    ray.train.report(metrics, checkpoint=checkpoint)
