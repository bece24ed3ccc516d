"""The resources section of a trial's config: what each of a trial's Ray Train workers
reserves, where it may run, and how the workers share the model (resources.strategy, with
the settings of resources.deepspeed). One of the sections `trainables/config.py` puts
together; the others are in `trainables/sections.py`.

Pure pydantic: importable without torch, Ray or anything from `sweeper`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from trainables.errors import FieldProblems
from trainables.sections import StrictModel, json_object, resolve_relative_path

__all__ = ["DeepSpeedSpec", "ResourcesSpec", "BUILT_IN_RESOURCES"]


class DeepSpeedSpec(StrictModel):
    """Settings of resources.strategy: deepspeed."""

    zero_stage: int = Field(
        2, ge=1, le=3,
        description="ZeRO stage: 1 partitions the optimizer states over the trial's workers, 2 also the "
        "gradients, 3 also the weights (the frozen base included: the way to fit 70B models).",
    )
    offload_optimizer: bool = Field(
        False, description="Keep the optimizer states (AdamW moments, fp32 master weights) in CPU memory."
    )
    config: dict[str, Any] | None = Field(
        None,
        description="Your own DeepSpeed config: a JSON file (relative to the YAML) or the mapping inline. "
        "Its zero_optimization wins over zero_stage and offload_optimizer; batch size, gradient "
        "accumulation, clipping and precision come from training.* (leave them out or 'auto').",
    )

    @field_validator("config", mode="before")
    @classmethod
    def _read_json_file(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, (str, Path)):
            return value
        path = Path(resolve_relative_path(value, info))
        config, problem = json_object(path) if path.is_file() else ({}, f"file {path} does not exist")
        if problem:
            raise ValueError(f"{problem}; give a DeepSpeed JSON config file or the mapping inline")
        return config

    @field_validator("config")
    @classmethod
    def _zero_stage_known(cls, value: dict | None) -> dict | None:
        stage = ((value or {}).get("zero_optimization") or {}).get("stage", 0)
        if stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}")
        return value

    @property
    def effective_stage(self) -> int:
        """The ZeRO stage the trial runs with: the user's config's, else zero_stage."""
        return int(((self.config or {}).get("zero_optimization") or {}).get("stage", self.zero_stage))

    @property
    def effective_offload(self) -> bool:
        zero = (self.config or {}).get("zero_optimization") or {}
        if "offload_optimizer" in zero:
            return (zero["offload_optimizer"] or {}).get("device", "none") in ("cpu", "nvme")
        return self.offload_optimizer


# Ray's own resources: not custom ones (CPUs and GPUs per worker have keys of their own).
BUILT_IN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


class ResourcesSpec(StrictModel):
    workers_per_trial: int = Field(1, ge=1, description="Ray Train workers (data-parallel ranks) per trial.")
    cpus_per_worker: float = Field(1, gt=0, description="CPUs reserved per worker.")
    gpus_per_worker: float | Literal["auto"] = Field(
        0.0,
        description="GPUs reserved per worker (1 when use_gpu). A fraction packs several one-worker trials "
        "on one GPU (0.5: two trials per GPU); each worker uses the GPU Ray assigned it. auto: the most "
        "one-worker trials whose memory forecasts fit one GPU with 15% of it left free (at most 16), on the "
        "GPU type the cluster reports, else cost.accelerator's; refused where not even one fits.",
    )
    use_gpu: bool = Field(False, description="Train on GPUs (NCCL); otherwise CPU (gloo).")
    strategy: Literal["ddp", "deepspeed", "fsdp"] = Field(
        "ddp",
        description="How a trial's workers share the work: ddp (every worker holds the whole model), "
        "deepspeed (ZeRO stage resources.deepspeed.zero_stage partitions optimizer states, gradients "
        "and weights), or fsdp (PyTorch FSDP2: weights, gradients and optimizer states sharded).",
    )
    deepspeed: DeepSpeedSpec = Field(default_factory=DeepSpeedSpec)
    custom: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources reserved per worker, {name: amount}: workers run only on nodes that "
        "have them (ray start --resources '{\"trainer\": 1}'), e.g. to keep them off the head or on one node type.",
    )
    worker_start_timeout_s: float | None = Field(
        None, gt=0,
        description="Seconds a trial of several workers waits for them to be placed and started before it fails, "
        "naming the resources it asked for and what the cluster had free (the sweep then goes on; a one-worker "
        "trial trains in its own trial process, which waits as Tune waits). Default: ten times the trial start "
        "the calibration measured, at least 60 (a resumed sweep: 60).",
    )

    @field_validator("gpus_per_worker", mode="before")
    @classmethod
    def _number_or_auto(cls, value: Any) -> Any:
        if value == "auto":
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = -1.0
        if not 0 <= number < math.inf:
            raise ValueError("must be a number >= 0 or auto")
        return number

    @field_validator("custom")
    @classmethod
    def _custom_resources_are_custom(cls, value: dict[str, float]) -> dict[str, float]:
        problems = []  # one keyed line each: resources.custom.<name>
        for name, amount in value.items():
            if name in BUILT_IN_RESOURCES:
                problems.append((
                    name,
                    "is one of Ray's own resources, not a custom one; CPUs and GPUs per worker are "
                    "resources.cpus_per_worker and resources.gpus_per_worker",
                ))
            elif not amount > 0:
                problems.append((name, f"must be > 0, got {amount:g}"))
        if problems:
            raise FieldProblems(problems)
        return value

    @model_validator(mode="after")
    def _gpu_consistent(self) -> "ResourcesSpec":
        if self.gpus_per_worker == "auto":
            return self._auto_packing_consistent()
        if self.use_gpu and self.gpus_per_worker == 0:
            object.__setattr__(self, "gpus_per_worker", 1.0)
        problems = []
        if self.gpus_per_worker > 0 and not self.use_gpu:
            problems.append((
                "gpus_per_worker",
                f"is {self.gpus_per_worker} but use_gpu is false; set resources.use_gpu: true or gpus_per_worker: 0",
            ))
        if 0 < self.gpus_per_worker < 1 and self.workers_per_trial > 1:
            problems.append((
                "gpus_per_worker",
                f"a fraction ({self.gpus_per_worker:g}) with workers_per_trial {self.workers_per_trial} can put two "
                "ranks of one trial on one GPU, which NCCL refuses; set gpus_per_worker: 1, or workers_per_trial: 1 "
                "to pack several trials on a GPU",
            ))
        if self.gpus_per_worker > 1 and self.gpus_per_worker != int(self.gpus_per_worker):
            problems.append((
                "gpus_per_worker",
                f"above 1 it must be a whole number, got {self.gpus_per_worker:g}",
            ))
        if problems:
            raise FieldProblems(problems)
        return self

    @property
    def in_trial_process(self) -> bool:
        """Whether a trial trains in Tune's own trial process (Ray Train's local mode, the
        process reused by the next trial): one worker per trial (sweeper/run/_trial.py)."""
        return self.workers_per_trial == 1

    def _auto_packing_consistent(self) -> "ResourcesSpec":
        problems = []
        if not self.use_gpu:
            problems.append(("gpus_per_worker", "auto packs trials on GPUs but use_gpu is false; set resources.use_gpu: true"))
        if self.workers_per_trial > 1:
            problems.append((
                "gpus_per_worker",
                f"auto packs one-worker trials on a GPU, but workers_per_trial is {self.workers_per_trial}; set "
                "gpus_per_worker: 1, or workers_per_trial: 1",
            ))
        if problems:
            raise FieldProblems(problems)
        return self
