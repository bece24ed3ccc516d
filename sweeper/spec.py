"""The YAML contract: a pydantic schema that is the single source of truth for every key,
its default, its valid values and its help text (`sweep reference` prints it).

`load_spec(path)` turns a YAML file into a validated `SweepSpec` or raises `UserError`
with one keyed line per problem, all problems at once.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sweeper.errors import UserError

BUILTIN_TINY_MODEL = "builtin:tiny-llama"

# Metrics each task reports at every evaluation, with the goal that makes sense for each.
TASK_METRICS: dict[str, dict[str, str]] = {
    "sft": {
        "eval_loss": "minimize",
        "eval_perplexity": "minimize",
        "train_loss": "minimize",
    },
    "dpo": {
        "eval_loss": "minimize",
        "eval_rewards_accuracy": "maximize",
        "eval_rewards_margin": "maximize",
        "eval_rewards_chosen": "maximize",
        "eval_rewards_rejected": "minimize",
        "train_loss": "minimize",
    },
}


class StrictModel(BaseModel):
    """Unknown keys are errors (with the nearest valid key suggested by `load_spec`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _resolve_path(value: Any, info: ValidationInfo) -> Any:
    """Relative paths in a YAML file are relative to that file, not to the shell."""
    base_dir = (info.context or {}).get("base_dir")
    if value is None or base_dir is None:
        return value
    path = Path(value).expanduser()
    return path if path.is_absolute() else (Path(base_dir) / path).resolve()


def _checks_files(info: ValidationInfo) -> bool:
    """Files are checked where the YAML is loaded; a trial on another node may not see them
    at the same path, and its data arrives through the object store anyway."""
    return (info.context or {}).get("check_files", True)


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
    def _local_paths_exist(cls, value: str, info: ValidationInfo) -> str:
        if value == BUILTIN_TINY_MODEL:
            return value
        looks_local = value.startswith(("/", "./", "../", "~")) or value.count("/") > 1
        if not looks_local:
            return value  # a hub id; resolved where it is loaded
        path = _resolve_path(value, info)
        if _checks_files(info) and not Path(path).is_dir():
            raise ValueError(
                f"model directory {path} does not exist; give a local model directory, "
                f"a hub id like 'Qwen/Qwen2.5-0.5B', or '{BUILTIN_TINY_MODEL}'"
            )
        return str(path)


class DataSpec(StrictModel):
    train: Path = Field(
        description="Training split, JSONL: one example a line. task sft: chat "
        "{'messages': [{'role', 'content'}, ...]} or {'prompt', 'completion'}; task dpo: "
        "{'prompt', 'chosen', 'rejected'}, all plain strings or all lists of chat messages."
    )
    eval: Path = Field(description="Evaluation split, same format as `train`.")
    max_length: int = Field(
        256, ge=16, le=131072, description="Examples are truncated to this many tokens."
    )

    @field_validator("train", "eval", mode="before")
    @classmethod
    def _relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        return _resolve_path(value, info)

    @field_validator("train", "eval")
    @classmethod
    def _file_exists(cls, value: Path, info: ValidationInfo) -> Path:
        if _checks_files(info) and not value.is_file():
            raise ValueError(f"file {value} does not exist; give a JSONL file")
        return value


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

    @model_validator(mode="after")
    def _eval_within_budget(self) -> "TrainingSpec":
        if self.eval_every > self.max_steps:
            raise ValueError(
                f"eval_every: must be <= training.max_steps ({self.max_steps}), got {self.eval_every}"
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


# ---------------------------------------------------------------- search distributions


class UniformDist(StrictModel):
    distribution: Literal["uniform"]
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> "UniformDist":
        if not self.low < self.high:
            raise ValueError(f"low: must be < high, got low={self.low}, high={self.high}")
        return self


class LogUniformDist(UniformDist):
    distribution: Literal["log_uniform"]  # type: ignore[assignment]

    @model_validator(mode="after")
    def _positive(self) -> "LogUniformDist":
        if self.low <= 0:
            raise ValueError(f"low: must be > 0 on a log scale, got {self.low}")
        return self


class IntUniformDist(StrictModel):
    distribution: Literal["int_uniform"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> "IntUniformDist":
        if not self.low < self.high:
            raise ValueError(f"low: must be < high, got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"low: must be > 0 with log: true, got {self.low}")
        if self.log and self.step != 1:
            raise ValueError("step: must be 1 with log: true (Optuna cannot combine them)")
        return self


class CategoricalDist(StrictModel):
    distribution: Literal["categorical"]
    values: list[Union[bool, int, float, str]] = Field(min_length=1)


Distribution = Annotated[
    Union[UniformDist, LogUniformDist, IntUniformDist, CategoricalDist],
    Field(discriminator="distribution"),
]


class SearchSpec(StrictModel):
    method: Literal["tpe", "random", "grid"] = Field(
        "tpe", description="Optuna sampler: tpe (default), random, or grid (categorical parameters only)."
    )
    metric: str = Field("eval_loss", description="Reported metric to optimise (see TASK_METRICS).")
    goal: Literal["minimize", "maximize"] = Field("minimize", description="Direction of `metric`.")
    num_trials: int = Field(8, ge=1, description="Trials to run (for grid: at most the grid size).")
    max_concurrent_trials: int | None = Field(
        None, ge=1, description="Cap on trials at once; default: as many as the cluster fits."
    )
    seed: int = Field(0, ge=0, description="Sampler seed: same seed, same sequence of configs.")
    max_failures: int = Field(
        1, ge=0, description="Retries of a failed trial (exception, NaN loss, lost worker) from its last checkpoint."
    )
    keep_best_adapters: int = Field(
        3, ge=1, description="Adapter checkpoints kept for the best this-many finished trials; the rest are deleted as the sweep goes."
    )
    parameters: dict[str, Distribution] = Field(
        default_factory=dict,
        description="Dotted config path (e.g. training.learning_rate) -> distribution: "
        "{distribution: uniform|log_uniform, low, high}, {distribution: int_uniform, low, "
        "high, step, log}, or {distribution: categorical, values: [...]}.",
    )


class EarlyStoppingSpec(StrictModel):
    scheduler: Literal["asha", "asha_stopping", "median", "none"] = Field(
        "asha",
        description="Trial scheduler: asha (successive halving by promotion: a trial waits, paused, at each "
        "rung until it ranks in the best 1/eta there, so the sweep trains what the rung arithmetic says; "
        "each promotion of a paused trial costs one trial setup), asha_stopping (Ray's ASHA: decides when a "
        "trial arrives at a rung, no pauses, early arrivals go on), median stopping, or none.",
    )
    grace_period: int = Field(
        10, ge=1, description="Steps every trial trains before it can be stopped (ASHA's r)."
    )
    reduction_factor: float = Field(3, ge=2, description="ASHA's eta: keep 1/eta of trials at each rung.")


class ResourcesSpec(StrictModel):
    workers_per_trial: int = Field(1, ge=1, description="Ray Train workers (DDP ranks) per trial.")
    cpus_per_worker: float = Field(1, gt=0, description="CPUs reserved per worker.")
    gpus_per_worker: float = Field(0, ge=0, description="GPUs reserved per worker (1 when use_gpu).")
    use_gpu: bool = Field(False, description="Train on GPUs (NCCL); otherwise CPU (gloo).")

    @model_validator(mode="after")
    def _gpu_consistent(self) -> "ResourcesSpec":
        if self.use_gpu and self.gpus_per_worker == 0:
            object.__setattr__(self, "gpus_per_worker", 1.0)
        if self.gpus_per_worker > 0 and not self.use_gpu:
            raise ValueError(
                f"gpus_per_worker: is {self.gpus_per_worker} but use_gpu is false; "
                "set resources.use_gpu: true or gpus_per_worker: 0"
            )
        return self


class ChaosSpec(StrictModel):
    """Deliberate faults, for testing how a deployment handles failing trials."""

    fault: Literal["none", "exception", "nan_loss", "kill_worker"] = Field(
        "none", description="Fault injected into the training loop at chaos.at_step (testing only; searchable, e.g. by grid)."
    )
    at_step: int = Field(1, ge=1, description="Optimizer step at which chaos.fault happens, on every attempt.")


class TrackingSpec(StrictModel):
    uri: str | None = Field(
        None,
        description="MLflow tracking URI (sqlite:///..., http://host:5000, ...); default: "
        "sqlite:///mlflow.db in the working directory, artifacts in ./mlartifacts.",
    )
    experiment: str = Field("sweeper", min_length=1, description="MLflow experiment that holds the sweep's runs.")


class CostSpec(StrictModel):
    accelerator: str | None = Field(
        None,
        description="Price-table key: cpu, a10g, l40s, a100-40gb, a100-80gb, h100, h200, rtx4090 "
        "(or one of cost.prices); default: cpu without GPUs, a100-80gb with.",
    )
    usd_per_hour: float | None = Field(
        None, ge=0, description="Price per accelerator-hour (per CPU core-hour on CPU); overrides the table."
    )
    prices: dict[str, float] = Field(
        default_factory=dict, description="Extra or overriding price-table entries, USD per accelerator-hour."
    )

    def resolved_accelerator(self, use_gpu: bool) -> str:
        return self.accelerator or ("a100-80gb" if use_gpu else "cpu")


class SweepSpec(StrictModel):
    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
        description="Sweep name: letters, digits, '_', '.', '-'; names the output folder and MLflow run.",
    )
    task: Literal["sft", "dpo"] = Field(
        "sft",
        description="What each trial trains: sft (LoRA supervised fine-tuning) or dpo (LoRA direct "
        "preference optimization; the reference is the base with adapters disabled).",
    )
    model: ModelSpec = Field(default_factory=ModelSpec)
    data: DataSpec
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    lora: LoraSpec = Field(default_factory=LoraSpec)
    dpo: DpoSpec | None = Field(None, description="Settings of task dpo (defaults apply when the section is left out).")
    search: SearchSpec = Field(default_factory=SearchSpec)
    early_stopping: EarlyStoppingSpec = Field(default_factory=EarlyStoppingSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    chaos: ChaosSpec = Field(default_factory=ChaosSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    cost: CostSpec = Field(default_factory=CostSpec)
    output_dir: Path | None = Field(
        None, description="Where the sweep's files go (Tune results, checkpoints, Optuna study); default ./sweeps/<name>."
    )

    @field_validator("output_dir", mode="before")
    @classmethod
    def _relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        return _resolve_path(value, info)

    @model_validator(mode="before")
    @classmethod
    def _dpo_defaults_for_dpo_task(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and raw.get("task") == "dpo" and raw.get("dpo") is None:
            return {**raw, "dpo": {}}
        return raw

    @property
    def sweep_dir(self) -> Path:
        return (self.output_dir or Path("sweeps") / self.name).resolve()

    @model_validator(mode="after")
    def _cross_field_checks(self) -> "SweepSpec":
        problems = [
            *_metric_problems(self),
            *_schedule_problems(self),
            *_search_problems(self),
            *_cost_problems(self),
            *_task_problems(self),
        ]
        if problems:
            raise ValueError(" | ".join(problems))
        return self


def _metric_problems(spec: SweepSpec) -> list[str]:
    metrics = TASK_METRICS[spec.task]
    if spec.search.metric not in metrics:
        return [
            f"search.metric: {spec.search.metric!r} is not reported by task {spec.task!r}; "
            f"valid: {', '.join(metrics)}"
        ]
    goal = metrics[spec.search.metric]
    if spec.search.goal != goal:
        better = "lower" if goal == "minimize" else "higher"
        return [
            f"search.goal: {spec.search.metric} is better when {better}, got {spec.search.goal!r}; "
            f"set search.goal: {goal}"
        ]
    return []


def _task_problems(spec: SweepSpec) -> list[str]:
    if spec.task != "dpo":
        given = ["dpo"] if spec.dpo is not None else []
        given += [f"search.parameters.{p}" for p in spec.search.parameters if p.split(".")[0] == "dpo"]
        return [
            f"{key}: only task dpo reads dpo.*, got task {spec.task!r}; set task: dpo or remove it" for key in given
        ]
    if spec.dpo.max_prompt_length >= spec.data.max_length:
        return [
            f"dpo.max_prompt_length: must be < data.max_length ({spec.data.max_length}), "
            f"got {spec.dpo.max_prompt_length}; lower it or raise data.max_length"
        ]
    return []


def _schedule_problems(spec: SweepSpec) -> list[str]:
    stopping, training = spec.early_stopping, spec.training
    if stopping.scheduler == "none":
        return []
    if not training.eval_every <= stopping.grace_period < training.max_steps:
        return [
            f"early_stopping.grace_period: must be >= training.eval_every ({training.eval_every}) "
            f"and < training.max_steps ({training.max_steps}), got {stopping.grace_period}"
        ]
    return []


def _cost_problems(spec: SweepSpec) -> list[str]:
    from sweeper.cost import PRICE_TABLE

    known = {**PRICE_TABLE, **spec.cost.prices}
    accelerator = spec.cost.accelerator
    if accelerator is not None and accelerator not in known and spec.cost.usd_per_hour is None:
        return [f"cost.accelerator: {accelerator!r} has no price; valid: {', '.join(known)}, or set cost.usd_per_hour"]
    return []


def _search_problems(spec: SweepSpec) -> list[str]:
    problems = []
    for path, dist in spec.search.parameters.items():
        key = f"search.parameters.{path}"
        if spec.dpo is None and path.split(".")[0] == "dpo":
            continue  # _task_problems says why
        if not _path_exists(spec, path):
            problems.append(f"{key}: no such config field; {_suggest_path(path)}")
            continue
        if path.split(".")[0] not in SEARCHABLE_SECTIONS:
            problems.append(f"{key}: only {', '.join(s + '.*' for s in SEARCHABLE_SECTIONS)} can be searched")
            continue
        if _is_int_field(path) and isinstance(dist, (UniformDist, LogUniformDist)):
            problems.append(f"{key}: {path} is an integer; use distribution: int_uniform or categorical")
            continue
        for value in _probe_values(dist):
            error = _override_error(spec, path, value)
            if error:
                problems.append(f"{key}: value {value!r} is invalid for {path}: {error}")
                break
    if spec.search.method == "grid":
        not_categorical = [p for p, d in spec.search.parameters.items() if not isinstance(d, CategoricalDist)]
        if not_categorical:
            problems.append(
                f"search.method: grid needs categorical values for every parameter, "
                f"got ranges for {', '.join(not_categorical)}"
            )
        elif spec.search.num_trials > grid_size(spec):
            problems.append(
                f"search.num_trials: grid has {grid_size(spec)} points, got num_trials={spec.search.num_trials}"
            )
    if not spec.search.parameters and spec.search.num_trials > 1:
        problems.append(
            "search.num_trials: nothing to search (search.parameters is empty); set num_trials: 1 to "
            "train this config once, or add dotted paths to search.parameters"
        )
    return problems


# Config sections whose fields `search.parameters` may name by dotted path.
SEARCHABLE_SECTIONS: dict[str, type[BaseModel]] = {
    "training": TrainingSpec,
    "lora": LoraSpec,
    "dpo": DpoSpec,
    "chaos": ChaosSpec,
}


def grid_size(spec: SweepSpec) -> int:
    return math.prod(len(d.values) for d in spec.search.parameters.values() if isinstance(d, CategoricalDist))


def _probe_values(dist: Any) -> list[Any]:
    """Values that bound what a distribution can sample: both ends of a range, every category."""
    if isinstance(dist, CategoricalDist):
        return list(dist.values)
    return [dist.low, dist.high]


# ---------------------------------------------------------------- dotted paths


def _path_exists(spec: SweepSpec, path: str) -> bool:
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, BaseModel) or part not in type(node).model_fields:
            return False
        node = getattr(node, part)
    return not isinstance(node, BaseModel)


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The schema class of a config section, also of an optional one (`DpoSpec | None`)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _all_leaf_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        section = section_model(field.annotation)
        if section:
            paths += _all_leaf_paths(section, f"{prefix}{name}.")
        else:
            paths.append(f"{prefix}{name}")
    return paths


def _is_int_field(path: str) -> bool:
    section, field_name = path.split(".", 1)
    return SEARCHABLE_SECTIONS[section].model_fields[field_name].annotation is int


def _suggest_path(path: str) -> str:
    candidates = [p for p in _all_leaf_paths(SweepSpec) if p.split(".")[0] in SEARCHABLE_SECTIONS]
    close = difflib.get_close_matches(path, candidates, n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}?"
    return "searchable: " + ", ".join(candidates)


def with_overrides(spec: SweepSpec, overrides: dict[str, Any]) -> SweepSpec:
    """The spec with dotted-path values applied and re-validated (a trial's config)."""
    raw = spec.model_dump(mode="python")
    for path, value in overrides.items():
        _set_path(raw, path, value)
    return SweepSpec.model_validate(raw, context={"check_files": False})


def single_run_spec(spec: SweepSpec, params: dict[str, Any], name: str) -> SweepSpec:
    """A complete config that trains one trial's values (`params`: dotted path -> value, as
    sampled or as MLflow stored them) as a single full run: nothing searched or stopped
    early, output in ./sweeps/<name>. best_config.yaml and `sweep export` are this."""
    raw = with_overrides(spec, params).model_dump(mode="python")
    raw["name"] = name
    raw["search"] = {**raw["search"], "parameters": {}, "num_trials": 1, "max_concurrent_trials": None}
    raw["early_stopping"] = {**raw["early_stopping"], "scheduler": "none"}
    raw["output_dir"] = None
    return SweepSpec.model_validate(raw, context={"check_files": False})


def _override_error(spec: SweepSpec, path: str, value: Any) -> str | None:
    """Why `value` is invalid at `path`, or None; validates only the section it lands in."""
    section = path.split(".", 1)[0]
    section_model = SEARCHABLE_SECTIONS[section]
    raw = spec.model_dump(mode="python")
    _set_path(raw, path, value)
    try:
        section_model.model_validate(raw[section])
    except ValidationError as exc:
        return "; ".join(_error_text(e) for e in exc.errors())
    return None


def _set_path(raw: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        raw = raw[part]
    raw[leaf] = value


# ---------------------------------------------------------------- loading and errors


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep YAML file; raise UserError listing every problem."""
    raw = read_yaml(path)
    return validate_spec(raw, base_dir=Path(path).resolve().parent, source=str(path))


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file; give the path of a sweep YAML file")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise UserError(f"{path}: invalid YAML at {where}: {exc.problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping of keys (name, data, search, ...), got {type(raw).__name__}")
    return raw


def validate_spec(raw: dict, base_dir: Path, source: str = "<yaml>") -> SweepSpec:
    try:
        return SweepSpec.model_validate(raw, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise UserError(*(line for err in exc.errors() for line in _format_error(err, raw))) from None


def _format_error(err: dict, raw: dict) -> list[str]:
    loc = [str(part) for part in err["loc"]]
    # Discriminated unions add the tag to the location; it is not a YAML key.
    if len(loc) >= 4 and loc[:2] == ["search", "parameters"] and loc[3] in {
        "uniform", "log_uniform", "int_uniform", "categorical"}:
        loc.pop(3)
    key = ".".join(loc)
    if err["type"] == "extra_forbidden":
        return [f"{key}: unknown key; {_nearest_key(loc)}"]
    if err["type"] == "missing":
        return [f"{key}: required key is missing"]
    message = _error_text(err)
    # Cross-field validators name their own sub-keys: "sub.key: message | other: message".
    lines = []
    for part in message.split(" | "):
        match = re.match(r"^([a-z_][\w.]*): (.*)$", part)
        if match and not key:
            lines.append(part)
        elif match:
            lines.append(f"{key}.{match.group(1)}: {match.group(2)}")
        else:
            given = _value_at(raw, err["loc"])
            got = f" (got {given!r})" if given is not _MISSING else ""
            lines.append(f"{key}: {part}{got}")
    return lines


def _error_text(err: dict) -> str:
    message = err["msg"]
    return message.removeprefix("Value error, ")


_MISSING = object()


def _value_at(raw: Any, loc: tuple) -> Any:
    node = raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return _MISSING
    return node


def _nearest_key(loc: list[str]) -> str:
    model: Any = SweepSpec
    for part in loc[:-1]:
        if part in ("parameters",) and model is SearchSpec:
            return "valid keys: distribution, low, high, step, log, values"
        field = model.model_fields.get(part) if isinstance(model, type) else None
        section = section_model(field.annotation) if field else None
        if section:
            model = section
        else:
            return "valid keys: distribution, low, high, step, log, values"
    valid = list(model.model_fields)
    given = loc[-1]
    close = difflib.get_close_matches(given, valid, n=1, cutoff=0.5)
    close = close or [v for v in valid if given.startswith(v) or v.startswith(given)][:1]
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}valid keys: {', '.join(valid)}"


def spec_hash(spec: SweepSpec) -> str:
    """Stable hash of the whole config, recorded with the sweep."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:12]


def spec_to_yaml(spec: SweepSpec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False)
