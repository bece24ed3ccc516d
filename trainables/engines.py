"""Trial engines: what trains inside a trial, chosen by the sweep's `trainer` key, and
the two sections of the engines that are not our own loop.

- `builtin`: our loops, trainables/sft.py and trainables/dpo.py.
- `trl`: trl's trainer (`trl` section: `method` picks SFTTrainer, DPOTrainer, KTOTrainer,
  or ORPO / CPO / SimPO from trl.experimental; every other key is a field of that
  trainer's config dataclass, checked against the dataclass itself). Runs in
  trainables/trl_engine.py.
- `function`: the user's own training function (`function` section: `entry_point`, and
  any other key is the user's own, passed through). Runs in trainables/function_engine.py.

Both sections take keys beyond their declared fields (`trl.beta`, `function.hidden`):
`search.parameters` may name them by dotted path, and `field_problem` says why a key
cannot be set. Pure pydantic at import; trl is imported only to check a `trl` section.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import re
import sys
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator, model_validator

from trainables.errors import FieldProblems
from trainables.reward_models import is_function_entry, reward_name
from trainables.sections import StrictModel, checks_files, resolve_relative_path

__all__ = [
    "Engine", "TrlMethod", "TRL_METHODS", "PREFERENCE_METHODS", "TrlSpec", "FunctionSpec", "OWNED_FIELDS",
    "ENGINE_FIELDS", "METHOD_TASK", "train_module", "preference_rows", "trl_config_class", "trl_trainer_class", "trl_config_fields", "load_entry_point",
    "engine_problems",
]

Engine = Literal["builtin", "trl", "function"]
TrlMethod = Literal["sft", "dpo", "kto", "orpo", "cpo", "simpo", "grpo"]

# method -> (module, config class, trainer class); SimPO is CPO with loss_type "simpo".
TRL_METHODS: dict[str, tuple[str, str, str]] = {
    "sft": ("trl", "SFTConfig", "SFTTrainer"),
    "dpo": ("trl", "DPOConfig", "DPOTrainer"),
    "kto": ("trl", "KTOConfig", "KTOTrainer"),
    "orpo": ("trl.experimental.orpo", "ORPOConfig", "ORPOTrainer"),
    "cpo": ("trl.experimental.cpo", "CPOConfig", "CPOTrainer"),
    "simpo": ("trl.experimental.cpo", "CPOConfig", "CPOTrainer"),
    "grpo": ("trl", "GRPOConfig", "GRPOTrainer"),
}
# What a method sets on its config before the user's fields (SimPO as trl's CPO docs give it).
METHOD_DEFAULTS: dict[str, dict[str, Any]] = {"simpo": {"loss_type": "simpo", "cpo_alpha": 0.0}}
# Methods that train on preference pairs (task dpo's data: prompt, chosen, rejected).
PREFERENCE_METHODS = ("dpo", "kto", "orpo", "cpo", "simpo")
# The task whose data each method trains on: grpo samples completions for the prompts of
# task sft's rows (trainables/grpo.py).
METHOD_TASK = {"sft": "sft", "grpo": "sft", **{method: "dpo" for method in PREFERENCE_METHODS}}

# Fields of the trainer's config that the sweep's own sections set: one key for each knob,
# so that the search, the rungs and the cost forecast read the same value as the trainer.
OWNED_FIELDS: dict[str, str] = {
    "max_steps": "training.max_steps",
    "learning_rate": "training.learning_rate",
    "per_device_train_batch_size": "training.per_device_batch_size",
    "per_device_eval_batch_size": "training.per_device_batch_size",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps",
    "lr_scheduler_type": "training.lr_scheduler",
    "warmup_steps": "training.warmup_ratio",
    "warmup_ratio": "training.warmup_ratio",
    "weight_decay": "training.weight_decay",
    "max_grad_norm": "training.max_grad_norm",
    "seed": "training.seed",
    "data_seed": "training.seed",
    "bf16": "training.precision",
    "fp16": "training.precision",
    "gradient_checkpointing": "training.gradient_checkpointing",
    "torch_compile": "training.compile",
    "max_length": "data.max_length",
    "use_cpu": "resources.use_gpu",
}
# Fields the engine sets itself, with why: evaluation, checkpoints and reports at the
# sweep's steps are what ASHA, resume and MLflow rely on.
ENGINE_FIELDS: dict[str, str] = {
    "output_dir": "the trial's checkpoints go to the sweep's storage",
    "eval_strategy": "the trial evaluates every training.eval_every steps",
    "eval_steps": "the trial evaluates every training.eval_every steps",
    "save_strategy": "a checkpoint is kept at every evaluation",
    "save_steps": "a checkpoint is kept at every evaluation",
    "save_total_limit": "the sweep's storage keeps each trial's latest checkpoint",
    "logging_strategy": "train loss is logged at every evaluation",
    "logging_steps": "train loss is logged at every evaluation",
    "report_to": "reports go to Ray Tune and MLflow through the sweep",
    "resume_from_checkpoint": "a resumed or promoted trial continues from its latest checkpoint",
    "num_train_epochs": "training.max_steps bounds every trial",
    "load_best_model_at_end": "the sweep ranks trials by search.metric at each evaluation",
    "disable_tqdm": "progress is the sweep's live table",
}


class TrlSpec(StrictModel):
    """trl's trainer for each trial (trainer: trl). `method` picks the trainer; grpo
    also takes `reward_funcs`; every other key is a field of that
    trainer's config dataclass (SFTConfig, DPOConfig, KTOConfig, ORPOConfig, CPOConfig,
    GRPOConfig), e.g. `loss_type`, `beta`, `num_generations`, and may be searched as
    `trl.<field>`."""

    model_config = ConfigDict(extra="allow")

    method: TrlMethod = Field(
        "sft",
        description="trl trainer: sft (SFTTrainer), dpo (DPOTrainer, every loss_type), kto (KTOTrainer, on the "
        "pairs unpaired), orpo (ORPOTrainer), cpo (CPOTrainer), simpo (CPOTrainer with loss_type simpo and "
        "cpo_alpha 0), grpo (GRPOTrainer on the prompts of task sft's rows, rewarded by trl.reward_funcs; "
        "docs/guides/grpo.md). Searchable among the preference methods. Any other key of the trl section is a "
        "field of the method's config dataclass (e.g. trl.beta, trl.loss_type, trl.simpo_gamma, trl.packing, "
        "trl.num_generations); searchable as trl.<field>.",
    )
    reward_funcs: list[str] | None = Field(
        None,
        description="trl.method grpo: the rewards, each FILE.py:FUNCTION (relative to the sweep file), called by "
        "trl as FUNCTION(prompts, completions, reference=[...], **kwargs) and returning one float (or None) per "
        "completion, `reference` being each row's reference answer; or a reward model, the hub id or local folder "
        "(relative to the sweep file) of a sequence-classification model with one label and its tokenizer, which "
        "trl loads (with trl.model_init_kwargs) and scores each prompt + completion with. Each is called (loaded) "
        "once on a few eval rows before any trial. Each evaluation reports eval_reward (their weighted sum's "
        "mean) and eval_reward_<NAME> per entry: the function's name, or the model's id or folder name after its "
        "last '/'.",
    )

    @field_validator("reward_funcs", mode="before")
    @classmethod
    def _relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list):
            return value
        resolved = []
        for index, entry in enumerate(value):
            entry = str(entry)
            if is_function_entry(entry):
                file, _, name = entry.rpartition(":")
                resolved.append(f"{resolve_relative_path(file, info)}:{name}")
            elif ":" in entry or entry.endswith(".py") or not entry.strip("/"):
                raise ValueError(f"entry {index}: expected FILE.py:FUNCTION or a reward model (a hub id like "
                                 f"org/name, or a local folder), got {entry!r}")
            else:
                resolved.append(_model_source(entry, info))
            name = reward_name(resolved[-1])
            if not re.fullmatch(r"[\w.-]+", name):
                raise ValueError(f"entry {index}: its reward is reported as eval_reward_{name}, which is no metric "
                                 "name; give the model a folder name of letters, digits, '_', '-' and '.'")
            if name in [reward_name(other) for other in resolved[:-1]] + ["std"]:
                raise ValueError(f"entry {index}: a reward named {name!r} is reported as eval_reward_{name}, the name "
                                 "of another's (or of eval_reward_std); give each reward function (or reward model "
                                 "folder) its own name")
        return resolved

    @model_validator(mode="before")
    @classmethod
    def _typed_fields(cls, raw: Any) -> Any:
        """Each field given as text in the type of its config field where it reads as one:
        a trial's values as MLflow keeps them ("0.5"), for `sweep export` and best_config.yaml."""
        if not isinstance(raw, dict) or raw.get("method", "sft") not in TRL_METHODS:
            return raw
        fields = trl_config_fields(raw.get("method", "sft"))
        typed = dict(raw)
        for name, value in raw.items():
            if isinstance(value, str) and name in fields and typing.get_origin(fields[name].type) is not list:
                try:
                    typed[name] = TypeAdapter(fields[name].type).validate_python(value, strict=False)
                except ValidationError:
                    pass  # field_problem names the type
        return typed

    @model_validator(mode="after")
    def _fields_of_the_method(self) -> "TrlSpec":
        problems = [(name, problem) for name, value in self.fields.items()
                    if (problem := self.field_problem(name, value)) is not None]
        if self.method == "grpo" and not self.reward_funcs:
            problems.append(("reward_funcs", "trl.method grpo needs at least one reward function: "
                                             "reward_funcs: [FILE.py:FUNCTION] (docs/guides/grpo.md)"))
        elif isinstance(weights := self.fields.get("reward_weights"), list) and len(weights) != len(self.reward_funcs):
            problems.append(("reward_weights", f"one weight per reward function: {len(self.reward_funcs)} in "
                                               f"trl.reward_funcs, got {len(weights)} weights"))
        elif self.method != "grpo" and self.reward_funcs is not None:
            problems.append(("reward_funcs", f"only trl.method grpo reads reward functions, got method "
                                             f"{self.method!r}; remove it"))
        if problems:
            raise FieldProblems(problems)
        return self

    @property
    def fields(self) -> dict[str, Any]:
        """The trainer config's fields this section sets (every key but `method`)."""
        return dict(self.model_extra or {})

    def field_problem(self, name: str, value: Any = dataclasses.MISSING) -> str | None:
        """Why `name` (with `value`, where given) cannot be set on this method's config, or None."""
        return trl_field_problem(self.method, name, value)

    def config_kwargs(self) -> dict[str, Any]:
        """The method's defaults, then this section's fields (a scalar for a list field wrapped)."""
        fields = trl_config_fields(self.method)
        values = {**METHOD_DEFAULTS.get(self.method, {}), **self.fields}
        return {name: _as_field_value(fields[name].type, value) for name, value in values.items()}


class FunctionSpec(StrictModel):
    """The user's own training function for each trial (trainer: function). Every key
    beyond `entry_point` is the user's own, passed to the function in its config and
    searchable as `function.<key>`."""

    model_config = ConfigDict(extra="allow")

    entry_point: str = Field(
        description="The training function, `path/to/file.py:fn` (relative to the YAML file) or "
        "`package.module:fn`; called as fn(config, reporter) in each trial's worker (docs/guides/engines.md). "
        "Any other key of the function section is passed to it in config['function'] and is searchable "
        "as function.<key>.",
    )

    @field_validator("entry_point")
    @classmethod
    def _importable(cls, value: str, info: ValidationInfo) -> str:
        target, sep, name = value.rpartition(":")
        if not sep or not target or not name.isidentifier():
            raise ValueError(f"expected 'path/to/file.py:fn' or 'package.module:fn', got {value!r}")
        if target.endswith(".py"):
            path = Path(target).expanduser()
            base_dir = (info.context or {}).get("base_dir")
            if not path.is_absolute() and base_dir is not None:
                path = (Path(base_dir) / path).resolve()
            value = f"{path}:{name}"
        if checks_files(info):
            problem = entry_point_problem(value)
            if problem:
                raise ValueError(problem)
        return value

    def field_problem(self, name: str, value: Any = dataclasses.MISSING) -> str | None:
        return None if name.isidentifier() else f"{name!r} is not a name a function's config can take"


def _model_source(entry: str, info: ValidationInfo) -> str:
    """A reward model's entry: a local folder (relative to the YAML file) resolved, a hub
    id as given; "org/name" is a hub id unless such a folder lies beside the YAML file (as
    model.name_or_path)."""
    path = resolve_relative_path(entry, info)
    looks_local = entry.startswith(("/", "./", "../", "~")) or entry.count("/") > 1 or Path(path).is_dir()
    return str(path) if looks_local else entry


def train_module(trainer: str, task: str) -> str:
    """The module whose `train(config, data, model_source, report, started_at, ...)` runs
    a trial: the built-in loop of the task, or the engine's."""
    return {
        "builtin": f"trainables.{task}", "trl": "trainables.trl_engine", "function": "trainables.function_engine",
    }[trainer]


def preference_rows(records: list[tuple[int, dict]]) -> list[dict]:
    """The rows of a split as trl's preference trainers take them: prompt, chosen, rejected."""
    return [{key: record[key] for key in ("prompt", "chosen", "rejected")} for _, record in records]


def trl_field_problem(method: str, name: str, value: Any = dataclasses.MISSING) -> str | None:
    """Why the field `name` (and `value`) cannot be set for trl method `method`, or None."""
    if name in OWNED_FIELDS:
        return f"set by {OWNED_FIELDS[name]} (one key for each knob); set it there"
    if name in ENGINE_FIELDS:
        return f"set by the sweep: {ENGINE_FIELDS[name]}; remove it"
    fields = trl_config_fields(method)
    config_name = TRL_METHODS[method][1]
    if name not in fields:
        others = [m for m in TRL_METHODS if m != method and name in trl_config_fields(m)]
        if others:
            return (f"not a field of {config_name} (trl.method {method}); it belongs to trl.method "
                    f"{' / '.join(others)}: set trl.method to one of them, or remove it")
        close = difflib.get_close_matches(name, list(fields), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"see the fields of trl's {config_name}"
        return f"not a field of {config_name} (trl.method {method}); {hint}"
    if value is dataclasses.MISSING:
        return None
    field = fields[name]
    try:
        checked = _as_field_value(field.type, value)
        TypeAdapter(field.type).validate_python(checked, strict=False)
    except ValidationError as exc:
        return f"{config_name}.{name} is {_type_text(field.type)}, got {value!r} ({exc.errors()[0]['msg']})"
    choices = field_choices(field)
    given = checked if isinstance(checked, list) else [checked]
    wrong = [v for v in given if choices and v not in choices]
    if wrong:
        return f"{wrong[0]!r} is not one of {config_name}.{name}'s values: {', '.join(map(str, choices))}"
    return None


def field_choices(field: dataclasses.Field) -> list[str]:
    """The values a config field names as its own: its `choices` metadata, or the
    quoted names after "Possible values are" in its help (DPOConfig.loss_type's)."""
    if field.metadata.get("choices"):
        return list(field.metadata["choices"])
    help_text = field.metadata.get("help", "")
    if "Possible values are" not in help_text:
        return []
    listed = help_text.split("Possible values are", 1)[1].split(".", 1)[0]
    return re.findall(r"`'([\w-]+)'`", listed)


def _as_field_value(annotation: Any, value: Any) -> Any:
    """A scalar given for a list field (DPOConfig.loss_type: "ipo") as the list trl keeps."""
    if typing.get_origin(annotation) is list and not isinstance(value, list):
        return [value]
    return value


def _type_text(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


@cache
def _trl_module(module: str) -> types.ModuleType:
    import warnings

    with warnings.catch_warnings():  # trl.experimental's warning that its API may change
        warnings.simplefilter("ignore")
        return importlib.import_module(module)


def trl_config_class(method: str) -> type:
    module, config, _ = TRL_METHODS[method]
    return getattr(_trl_module(module), config)


def trl_trainer_class(method: str) -> type:
    module, _, trainer = TRL_METHODS[method]
    return getattr(_trl_module(module), trainer)


@cache
def trl_config_fields(method: str) -> dict[str, dataclasses.Field]:
    """The fields of method's config dataclass, by name (init fields only)."""
    return {field.name: field for field in dataclasses.fields(trl_config_class(method)) if field.init}


def load_entry_point(entry_point: str):
    """The function `entry_point` names: `file.py:fn` (an absolute path) or `module:fn`."""
    target, _, name = entry_point.rpartition(":")
    if target.endswith(".py"):
        module_name = f"sweeper_entry_point_{abs(hash(target))}"
        if module_name not in sys.modules:
            spec = importlib.util.spec_from_file_location(module_name, target)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[module_name]
                raise
        module = sys.modules[module_name]
    else:
        module = importlib.import_module(target)
    return getattr(module, name)


def entry_point_problem(entry_point: str) -> str | None:
    """Why `entry_point` cannot be called as fn(config, reporter), or None. Imports it."""
    target, _, name = entry_point.rpartition(":")
    if target.endswith(".py") and not Path(target).is_file():
        return f"file {target} does not exist; give 'path/to/file.py:fn' relative to the YAML file"
    try:
        function = load_entry_point(entry_point)
    except AttributeError:
        return f"{target} has no {name!r}; give the name of its training function after ':'"
    except BaseException as exc:  # the user's module failed to import: say how, in one line
        lines = str(exc).strip().splitlines()
        return f"cannot import {target}: {type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    if not callable(function):
        return f"{entry_point} is a {type(function).__name__}, not a function"
    try:
        inspect.signature(function).bind(object(), object())
    except TypeError:
        return f"{entry_point} must take (config, reporter), got ({', '.join(inspect.signature(function).parameters)})"
    except ValueError:
        pass  # a builtin without a signature: called as given
    return None


def engine_problems(trainer: str, task: str, trl: TrlSpec | None, function: FunctionSpec | None,
                    given: set[str], searched: list[str], strategy: str, quantization: str,
                    fault: str) -> list[tuple[str, str]]:
    """Settings that do not go with the chosen engine: (dotted YAML key, what is wrong and
    what would be valid). `given`: the top-level keys the YAML sets; `searched`: the dotted
    paths of search.parameters."""
    problems: list[tuple[str, str]] = []
    for section, engine in (("trl", "trl"), ("function", "function")):
        if trainer != engine and (section in given or any(p.split(".")[0] == section for p in searched)):
            problems.append((section, f"only trainer {engine} reads {section}.*, got trainer {trainer!r}; "
                                      f"set trainer: {engine} or remove it"))
    if trainer == "builtin":
        return problems
    if trainer == "trl" and trl is None:
        problems.append(("trl", "trainer trl needs a trl section (at least trl.method)"))
    if trainer == "function" and function is None:
        problems.append(("function", "trainer function needs function.entry_point: 'path/to/file.py:fn'"))
    if trainer == "trl" and trl is not None:
        wanted = METHOD_TASK[trl.method]
        if task != wanted:
            problems.append(("task", f"trl.method {trl.method} trains on "
                             + ("chat or prompt/completion examples" if wanted == "sft" else "preference pairs")
                             + f" (task {wanted}), got task {task!r}; set task: {wanted}"))
        for path in searched:
            if path.startswith("dpo."):
                problems.append((f"search.parameters.{path}", f"trainer trl does not read dpo.*; search "
                                 f"trl.{path.split('.', 1)[1]} (a field of trl's config) instead"))
    why = {"trl": "trl's trainer", "function": "your own function"}[trainer]
    if strategy != "ddp":
        fix = ("pass the trainer's own trl.deepspeed (a ZeRO config file) or trl.fsdp" if trainer == "trl"
               else "set it up inside your function")
        problems.append(("resources.strategy", f"{strategy} is the built-in loop's; with trainer {trainer} {fix}, "
                                               "and set resources.strategy: ddp"))
    if quantization != "none":
        problems.append(("model.quantization", f"loads the base quantized for the built-in loop only; with "
                                               f"trainer {trainer} set model.quantization: none"
                         + (" and pass trl.model_init_kwargs" if trainer == "trl" else "")))
    if fault != "none":
        problems.append(("chaos.fault", f"faults are injected into the built-in loop only, not {why}; "
                                        "set chaos.fault: none"))
    return problems
