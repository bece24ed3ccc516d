"""The trial contract: what one trial trains, as a typed config. `TrialConfig` holds the
task and the sections a trial's training loop reads (model, data, training, lora, dpo,
resources, chaos); the sweep's schema (`sweeper.spec.schema.SweepSpec`) is built from these same
sections, so each key, default and help text is written once, here.

The driver validates the whole sweep once, builds its `TrialConfig`
(`SweepSpec.trial_config()`), and each trial applies its sampled values with
`TrialConfig.with_values` (only the sections they land in are validated again). The Ray
Train workers receive that object as it is.

Pure pydantic: importable without torch, Ray or anything from `sweeper`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, ValidationInfo, field_validator, model_validator

from trainables.errors import FieldProblems

__all__ = [
    "BUILTIN_MODELS", "BUILTIN_TINY_MODEL", "Task", "StrictModel", "ModelSpec", "DataSpec", "HubSplit", "TrainingSpec",
    "LoraSpec", "DpoSpec", "ResourcesSpec", "DeepSpeedSpec", "ChaosSpec", "TrialConfig", "TRIAL_SECTIONS",
    "resolve_relative_path", "checks_files", "model_folder_problem", "trial_problems",
]

BUILTIN_TINY_MODEL = "builtin:tiny-llama"
# Models built locally instead of loaded (trainables/models.py builds them).
BUILTIN_MODELS = (BUILTIN_TINY_MODEL,)

Task = Literal["sft", "dpo"]


class StrictModel(BaseModel):
    """Unknown keys are errors (with the nearest valid key suggested by the loader)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def resolve_relative_path(value: Any, info: ValidationInfo) -> Any:
    """Relative paths in a YAML file are relative to that file, not to the shell
    (validation context `base_dir`: the YAML file's folder)."""
    base_dir = (info.context or {}).get("base_dir")
    if value is None or base_dir is None:
        return value
    path = Path(value).expanduser()
    return path if path.is_absolute() else (Path(base_dir) / path).resolve()


def checks_files(info: ValidationInfo) -> bool:
    """Files are checked where the YAML is loaded (validation context `check_files`,
    default on); a trial on another node may not see them at the same path, and its data
    arrives through the object store anyway."""
    return (info.context or {}).get("check_files", True)


# Files `from_pretrained` loads weights from; one of them makes a folder a model.
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")
# Files a tokenizer is loaded from; `AutoTokenizer.from_pretrained` needs one of them.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
_MODEL_FIX = f"give the folder that save_pretrained wrote, a hub id like 'Qwen/Qwen2.5-0.5B', or '{BUILTIN_TINY_MODEL}'"


def model_folder_problem(path: Path) -> str | None:
    """Why the local folder `path` cannot be loaded as a model (or a LoRA adapter on its
    base), or None. Cheap: reads config files, imports nothing heavy."""
    if not path.exists():
        return (
            f"model directory {path} does not exist; give a local model directory, "
            f"a hub id like 'Qwen/Qwen2.5-0.5B', or '{BUILTIN_TINY_MODEL}'"
        )
    if not path.is_dir():
        return f"{path} is a file, not a model directory; {_MODEL_FIX}"
    if (path / "adapter_config.json").is_file():
        return _adapter_problem(path)
    config, problem = _json_object(path / "config.json")
    if problem:
        return f"model directory {path}: {problem}; {_MODEL_FIX}"
    if not isinstance(config.get("model_type"), str):
        return f"model directory {path}: config.json has no 'model_type' (not a transformers model config); {_MODEL_FIX}"
    if not any(any(path.glob(pattern)) for pattern in _WEIGHT_PATTERNS):
        return f"model directory {path} has no weights (*.safetensors or pytorch_model.bin); {_MODEL_FIX}"
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        return (
            f"model directory {path} has no tokenizer ({', '.join(_TOKENIZER_FILES[:2])}, ...); "
            "save it there with tokenizer.save_pretrained"
        )
    return None


def _adapter_problem(path: Path) -> str | None:
    config, problem = _json_object(path / "adapter_config.json")
    if problem:
        return f"adapter directory {path}: {problem}; give the folder that a peft model's save_pretrained wrote"
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        return f"adapter directory {path}: adapter_config.json names no base_model_name_or_path; set it to the base model"
    if Path(base).is_absolute():
        base_problem = model_folder_problem(Path(base))
        if base_problem:
            return f"the base model of adapter {path}: {base_problem}"
    return None


def _json_object(file: Path) -> tuple[dict, str | None]:
    """The JSON object in `file`, or why there is none."""
    if not file.is_file():
        return {}, f"no {file.name}"
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return {}, f"cannot read {file.name}: {exc}"
    except json.JSONDecodeError as exc:
        return {}, f"{file.name} is not valid JSON (line {exc.lineno}: {exc.msg})"
    if not isinstance(value, dict):
        return {}, f"{file.name} is not a JSON object"
    return value, None


class ModelSpec(StrictModel):
    name_or_path: str = Field(
        BUILTIN_TINY_MODEL,
        description=(
            "Base model: a Hugging Face hub id (org/name), a local model directory, a "
            "LoRA adapter directory (its base is loaded and the adapter merged), or "
            f"'{BUILTIN_TINY_MODEL}' (a 2-layer Llama built locally, no download)."
        ),
    )

    @field_validator("name_or_path")
    @classmethod
    def _loadable(cls, value: str, info: ValidationInfo) -> str:
        if value.startswith("builtin:"):
            if value not in BUILTIN_MODELS:
                raise ValueError(f"no built-in model {value!r}; valid: {', '.join(BUILTIN_MODELS)}")
            return value
        path = resolve_relative_path(value, info)
        # "org/name" is a hub id unless such a folder lies beside the YAML file.
        looks_local = value.startswith(("/", "./", "../", "~")) or value.count("/") > 1 or Path(path).is_dir()
        if not looks_local:
            return value  # a hub id; resolved where it is loaded
        if checks_files(info):
            problem = model_folder_problem(Path(path))
            if problem:
                raise ValueError(problem)
        return str(path)

    quantization: Literal["none", "nf4", "int8"] = Field(
        "none",
        description="Load the frozen base weights quantized with bitsandbytes (QLoRA): nf4 (4-bit NormalFloat "
        "with double quantization) or int8; the adapters train in training.precision, which is also the "
        "compute dtype, after peft's k-bit preparation. Needs resources.strategy: ddp.",
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = Field(
        "sdpa",
        description="Attention kernel: sdpa (PyTorch's, default), eager, or flash_attention_2 (needs the "
        "flash-attn package, GPUs and bf16/fp16).",
    )


@dataclass(frozen=True)
class HubSplit:
    """One split of a dataset on the Hugging Face Hub, written `org/name:split` in YAML."""

    repo_id: str
    split: str

    def __str__(self) -> str:
        return f"{self.repo_id}:{self.split}"

    @classmethod
    def parse(cls, value: Any) -> "HubSplit | None":
        """`org/name:split` as a HubSplit; None for anything else (a path)."""
        match = _HUB_SPLIT.fullmatch(value) if isinstance(value, str) else None
        return cls(match["repo"], match["split"]) if match else None


# A Hub repo id (owner/name: letters, digits, '-', '_', '.') and a split name.
_HUB_SPLIT = re.compile(r"(?P<repo>[\w.-]+/[\w.-]+):(?P<split>[\w.-]+)")

# A data split: a local file or folder, or a Hub dataset's split (written back as text).
DataSource = Annotated[Path | HubSplit, PlainSerializer(str, return_type=str)]


class DataSpec(StrictModel):
    train: DataSource = Field(
        description="Training split: a JSONL file (one example a line), a Parquet file, a folder written "
        "by datasets' save_to_disk (one row an example), or a Hugging Face Hub dataset's split as "
        "org/name:split (e.g. trl-lib/tldr:train), read through the Hub cache (HF_HUB_CACHE, HF_HOME; "
        "HF_HUB_OFFLINE=1 once cached) as datasets.load_dataset reads its files. task sft: chat "
        "{'messages': [{'role', 'content'}, ...]} or {'prompt', 'completion'}; task dpo: "
        "{'prompt', 'chosen', 'rejected'}, all plain strings or all lists of chat messages."
    )
    eval: DataSource = Field(description="Evaluation split, same format as `train`.")
    max_length: int = Field(
        256, ge=16, le=131072, description="Examples are truncated to this many tokens."
    )

    @field_validator("train", "eval", mode="before")
    @classmethod
    def _relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        """A local path relative to the YAML file; `org/name:split` is a Hub split
        unless a file or folder of that name exists there."""
        hub_split, path = HubSplit.parse(value), resolve_relative_path(value, info)
        if hub_split is not None and not Path(path).exists():
            return hub_split
        return path

    @field_validator("train", "eval")
    @classmethod
    def _file_exists(cls, value: Path | HubSplit, info: ValidationInfo) -> Path | HubSplit:
        # A Hub split is looked up (cache, then Hub) when the sweep's data is read.
        if isinstance(value, HubSplit) or not checks_files(info) or value.is_file() or is_saved_dataset(value):
            return value
        if value.is_dir():
            raise ValueError(
                f"{value} is a folder but not a dataset written by datasets' save_to_disk (no state.json); "
                "give a JSONL or Parquet file, or such a folder"
            )
        raise ValueError(
            f"file {value} does not exist; give a JSONL or Parquet file, a save_to_disk folder, "
            "or a Hub dataset's split as org/name:split"
        )


def is_saved_dataset(folder: Path) -> bool:
    """A folder written by `datasets` save_to_disk: one split (state.json) or several
    (dataset_dict.json; trainables.data names them when it reads the folder)."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


class TrainingSpec(StrictModel):
    max_steps: int = Field(100, ge=1, description="Optimizer steps per trial (the ASHA budget R).")
    eval_every: int = Field(10, ge=1, description="Evaluate and report every this many steps.")
    per_device_batch_size: int = Field(8, ge=1, description="Examples per worker per micro-batch.")
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-batches per optimizer step.")
    learning_rate: float = Field(2e-4, gt=0, lt=1, description="Peak learning rate (AdamW).")
    lr_scheduler: Literal["cosine", "linear", "constant"] = Field(
        "cosine", description="Decay after warmup: cosine, linear, or constant."
    )
    warmup_ratio: float = Field(0.03, ge=0, lt=1, description="Share of max_steps spent in linear warmup.")
    weight_decay: float = Field(0.0, ge=0, lt=1, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    seed: int = Field(0, ge=0, description="Seed for adapter init and data order: same seed, same run.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="Compute precision: fp32 (CPU), bf16 (Ampere+ GPUs), fp16 (older GPUs)."
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each layer's activations in the backward pass instead of keeping them "
        "(non-reentrant): activation memory falls from every layer's to one layer's, for about a third "
        "more compute per step. Losses are unchanged.",
    )

    @model_validator(mode="after")
    def _eval_within_budget(self) -> "TrainingSpec":
        if self.eval_every > self.max_steps:
            raise FieldProblems(
                [("eval_every", f"must be <= training.max_steps ({self.max_steps}), got {self.eval_every}")]
            )
        return self


class LoraSpec(StrictModel):
    r: int = Field(8, ge=1, le=1024, description="LoRA rank.")
    alpha: float = Field(16, gt=0, description="LoRA alpha (scale = alpha / r).")
    alpha_per_rank: float | None = Field(
        None,
        gt=0,
        description="If set, alpha = alpha_per_rank x r, overriding `alpha`; search this "
        "to tie alpha to the sampled rank (2 is the common default).",
    )
    dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the LoRA path.")
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="Module names that get adapters (attention and MLP projections).",
    )

    @property
    def effective_alpha(self) -> float:
        return self.alpha_per_rank * self.r if self.alpha_per_rank else self.alpha


class DpoSpec(StrictModel):
    beta: float = Field(
        0.1, gt=0, description="DPO beta: how strongly the policy is held to the reference (higher = closer)."
    )
    loss_type: Literal["sigmoid", "ipo", "hinge"] = Field(
        "sigmoid",
        description="trl's DPO loss variant: sigmoid (DPO), ipo (IPO, per-token log-ratios), hinge (SLiC).",
    )
    max_prompt_length: int = Field(
        128, ge=1, description="Prompts are cut to their last this many tokens; must be < data.max_length."
    )


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
        config, problem = _json_object(path) if path.is_file() else ({}, f"file {path} does not exist")
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
    gpus_per_worker: float = Field(
        0, ge=0,
        description="GPUs reserved per worker (1 when use_gpu). A fraction packs several one-worker trials "
        "on one GPU (0.5: two trials per GPU); each worker uses the GPU Ray assigned it.",
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


class ChaosSpec(StrictModel):
    """Deliberate faults, for testing how a deployment handles failing trials."""

    fault: Literal["none", "exception", "nan_loss", "kill_worker"] = Field(
        "none", description="Fault injected into the training loop at chaos.at_step (testing only; searchable, e.g. by grid)."
    )
    at_step: int = Field(1, ge=1, description="Optimizer step at which chaos.fault happens, on every attempt.")


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
            if section not in TRIAL_SECTIONS or field not in TRIAL_SECTIONS[section].model_fields:
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
