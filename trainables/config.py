"""The trial contract: what one trial trains, as a typed config. `TrialConfig` holds the
task and the sections a trial's training loop reads (model, data, training, lora, dpo,
chaos: `trainables/sections.py`; resources: `trainables/resources.py`), the engine that
trains it (`trainer`, with its trl or function section: `trainables/engines.py`), and
`trial_problems` checks the settings of different sections that cannot go together. The
sweep's schema (`sweeper.spec._schema.SweepSpec`) is built from these same sections and
runs the same cross-section checks.

The driver validates the whole sweep once, builds its `TrialConfig`
(`SweepSpec.trial_config()`), and each trial applies its sampled values with
`TrialConfig.with_values` (only the sections they land in are validated again). The Ray
Train workers receive that object as it is.

Pure pydantic: importable without torch, Ray or anything from `sweeper`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from trainables.engines import Engine, FunctionSpec, TrlSpec
from trainables.errors import FieldProblems
from trainables.resources import ResourcesSpec
from trainables.sections import (
    ChaosSpec,
    DataSpec,
    DpoSpec,
    LoraSpec,
    ModelSpec,
    StrictModel,
    Task,
    TrainingSpec,
)

__all__ = ["TrialConfig", "TRIAL_SECTIONS", "trial_problems"]


class TrialConfig(StrictModel):
    """What one trial trains: the task and the config sections its training loop reads,
    with the trial's sampled values applied. Built on the driver from a validated sweep
    (`SweepSpec.trial_config()`), never from YAML, so its files are not checked again."""

    task: Task
    model: ModelSpec = Field(default_factory=ModelSpec)
    data: DataSpec
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    lora: LoraSpec = Field(default_factory=LoraSpec)
    dpo: DpoSpec | None = None
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    chaos: ChaosSpec = Field(default_factory=ChaosSpec)
    trainer: Engine = "builtin"
    trl: TrlSpec | None = None
    function: FunctionSpec | None = None

    @model_validator(mode="after")
    def _dpo_settings_for_dpo(self) -> "TrialConfig":
        problems = [("dpo", "task dpo needs its dpo section")] if self.task == "dpo" and self.dpo is None else []
        problems += trial_problems(self.model, self.training, self.resources)
        if problems:
            raise FieldProblems(problems)
        return self

    def with_values(self, values: Mapping[str, Any]) -> "TrialConfig":
        """This config with `values` (dotted path -> value, e.g. a trial's sampled
        {"training.learning_rate": 3e-4}) applied. Only the sections the values land in
        are validated again; raises pydantic's ValidationError for an invalid value and
        KeyError for a path that names no field of a trial section."""
        sections: dict[str, dict] = {}
        for path, value in values.items():
            section, _, field = path.partition(".")
            open_section = section in TRIAL_SECTIONS and TRIAL_SECTIONS[section].model_config.get("extra") == "allow"
            if section not in TRIAL_SECTIONS or not (open_section or field in TRIAL_SECTIONS[section].model_fields):
                raise KeyError(f"{path}: not a field of the trial sections ({', '.join(TRIAL_SECTIONS)})")
            current = getattr(self, section)
            if current is None:
                raise KeyError(f"{path}: this trial's task {self.task!r} has no {section} section")
            sections.setdefault(section, current.model_dump(mode="python"))[field] = value
        updates = {
            name: TRIAL_SECTIONS[name].model_validate(raw, context={"check_files": False})
            for name, raw in sections.items()
        }
        return self.model_copy(update=updates)


# The sections of a trial's config that hold fields (task is a plain value).
TRIAL_SECTIONS: dict[str, type[StrictModel]] = {
    "model": ModelSpec,
    "data": DataSpec,
    "training": TrainingSpec,
    "lora": LoraSpec,
    "dpo": DpoSpec,
    "resources": ResourcesSpec,
    "chaos": ChaosSpec,
    "trl": TrlSpec,
    "function": FunctionSpec,
}


def trial_problems(model: ModelSpec, training: TrainingSpec, resources: ResourcesSpec) -> list[tuple[str, str]]:
    """Settings of different sections that cannot go together, and packages they need that
    are missing: (dotted YAML key, what is wrong and what would be valid). The sweep's
    schema runs this too, on the sections before any sampled value is applied."""
    problems: list[tuple[str, str]] = []
    if model.quantization != "none":
        if resources.strategy != "ddp":
            problems.append((
                "model.quantization",
                f"{model.quantization} cannot be combined with resources.strategy {resources.strategy} "
                "(bitsandbytes weights are not partitioned by ZeRO or FSDP here); set resources.strategy: ddp, "
                "or model.quantization: none and let ZeRO-3/FSDP shard the weights",
            ))
        if not _installed("bitsandbytes"):
            problems.append((
                "model.quantization",
                f"{model.quantization} needs the bitsandbytes package; pip install 'bitsandbytes>=0.50', or set "
                "model.quantization: none",
            ))
    if model.attn_implementation == "flash_attention_2":
        if not resources.use_gpu or training.precision == "fp32":
            problems.append((
                "model.attn_implementation",
                "flash_attention_2 runs on GPUs in bf16 or fp16; set resources.use_gpu: true and "
                "training.precision: bf16, or attn_implementation: sdpa",
            ))
        elif not _installed("flash_attn"):
            problems.append((
                "model.attn_implementation",
                "flash_attention_2 needs the flash-attn package (pip install flash-attn); or set sdpa",
            ))
    if training.compile and resources.strategy != "ddp":
        problems.append((
            "training.compile",
            f"torch.compile runs under resources.strategy ddp here ({resources.strategy} wraps the model its own "
            "way); set resources.strategy: ddp, or training.compile: false",
        ))
    if (resources.strategy == "deepspeed" and resources.deepspeed.effective_stage == 3
            and (Path(model.name_or_path) / "adapter_config.json").is_file()):
        problems.append((
            "model.name_or_path",
            f"{model.name_or_path} is a LoRA adapter folder, merged into its base as it loads, and ZeRO-3 "
            "partitions the base's weights as they are created, where nothing can be merged; merge the adapter "
            "first (peft's merge_and_unload, then save_pretrained) and give that folder, or set "
            "resources.strategy: fsdp (its first worker merges it) or deepspeed.zero_stage: 2",
        ))
    if resources.strategy == "deepspeed" and not _installed("deepspeed"):
        problems.append((
            "resources.strategy",
            "deepspeed needs the deepspeed package: pip install -e '.[deepspeed]' (DS_BUILD_OPS=0 without a "
            "GPU), or set resources.strategy: ddp",
        ))
    return problems


def _installed(package: str) -> bool:
    """Whether `package` can be imported here (found, not imported: cheap)."""
    import importlib.util

    return importlib.util.find_spec(package) is not None
