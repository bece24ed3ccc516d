"""The YAML contract: a pydantic schema that is the single source of truth for every key,
its default, its valid values and its help text (`sweep reference` prints it). The
sections a trial trains with are defined in `trainables/sections.py` and
`trainables/resources.py` (put together in `trainables/config.py`, the trial contract)
and composed here with the driver's own (search, early_stopping, tracking, cost).

`load_spec(path)` turns a YAML file into a validated `SweepSpec` or raises `UserError`
with one keyed line per problem, all problems at once. The driver validates once; a
trial gets `SweepSpec.trial_config()` with its sampled values applied.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from sweeper.spec.budget import BudgetSpec, budget_problems
from sweeper.errors import UserError
from trainables.config import TrialConfig, trial_problems
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
    checks_files,
    resolve_relative_path,
)
from trainables.errors import FieldProblems
from trainables.metrics import TASK_METRICS


# ---------------------------------------------------------------- search distributions


class UniformDist(StrictModel):
    distribution: Literal["uniform"]
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> "UniformDist":
        if not self.low < self.high:
            raise FieldProblems([("low", f"must be < high, got low={self.low}, high={self.high}")])
        return self


class LogUniformDist(UniformDist):
    distribution: Literal["log_uniform"]  # type: ignore[assignment]

    @model_validator(mode="after")
    def _positive(self) -> "LogUniformDist":
        if self.low <= 0:
            raise FieldProblems([("low", f"must be > 0 on a log scale, got {self.low}")])
        return self


class IntUniformDist(StrictModel):
    distribution: Literal["int_uniform"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> "IntUniformDist":
        problems = []
        if not self.low < self.high:
            problems.append(("low", f"must be < high, got low={self.low}, high={self.high}"))
        if self.log and self.low <= 0:
            problems.append(("low", f"must be > 0 with log: true, got {self.low}"))
        if self.log and self.step != 1:
            problems.append(("step", "must be 1 with log: true (Optuna cannot combine them)"))
        if problems:
            raise FieldProblems(problems)
        return self


class CategoricalDist(StrictModel):
    distribution: Literal["categorical"]
    values: list[Union[bool, int, float, str]] = Field(min_length=1)


Distribution = Annotated[
    Union[UniformDist, LogUniformDist, IntUniformDist, CategoricalDist],
    Field(discriminator="distribution"),
]


class WarmStartSpec(StrictModel):
    sweep: str = Field(description="Name of an earlier sweep whose Optuna study seeds this search.")
    top_k: int = Field(
        3, ge=0, description="Its best this-many trials' configs run first (0: its trials only inform the sampler)."
    )
    sweep_dir: Path | None = Field(
        None, description="The earlier sweep's folder; default: beside this sweep's folder (./sweeps/<sweep>)."
    )

    @field_validator("sweep_dir", mode="before")
    @classmethod
    def _relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_relative_path(value, info)


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
    warm_start: list[WarmStartSpec] = Field(
        default_factory=list,
        description="Earlier sweeps to start from: {sweep: NAME, top_k: N} or a list of them. Their finished "
        "trials are added to this search's study and their best top_k configs run first; parameters not in "
        "this search space, or out of its range, are left out (one note each).",
    )

    @field_validator("warm_start", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value


class EarlyStoppingSpec(StrictModel):
    scheduler: Literal["asha", "asha_stopping", "median", "none"] = Field(
        "asha",
        description="Trial scheduler: asha (successive halving by promotion: a trial waits, paused, at each "
        "rung until it ranks in the best 1/eta there, so the sweep trains what the rung arithmetic says; "
        "each promotion of a paused trial costs one trial setup), asha_stopping (Ray's ASHA: decides when a "
        "trial arrives at a rung, no pauses, early arrivals go on), median stopping, or none.",
    )
    grace_period: int | None = Field(
        None,
        ge=1,
        description="Steps every trial trains before it can be stopped (ASHA's r: the first rung). Default: "
        "training.max_steps / 27 rounded up to an evaluation, about 4% of training (243 steps, eval every 9: "
        "step 9; 90 steps, eval every 10: step 10).",
    )
    reduction_factor: float | None = Field(
        None,
        ge=2,
        description="ASHA's eta: keep 1/eta of the trials ranked at each rung. Default: 4 under asha (its one "
        "rung keeps a quarter), 3 under asha_stopping.",
    )
    rung_spacing: float | None = Field(
        None,
        ge=2,
        description="asha only: steps multiply by this from one rung to the next (rungs at grace_period x "
        "rung_spacing^k below max_steps), where early_stopping.rungs asks for more than one. Default: "
        "reduction_factor, as in ASHA. Spaced wider than reduction_factor, trials are ranked less often and "
        "more go on from each rung (reduction_factor 2, rung_spacing 4, rungs: all: rungs 9, 36, 144 of 243, "
        "keeping half at each; benchmarks/README.md, search quality).",
    )
    rungs: int | Literal["all"] | None = Field(
        None,
        description="asha only: how many rungs rank the trials; from the last one the trials that go on train "
        "to max_steps. Default 1, a screen: every trial trains grace_period steps and the best "
        "1/reduction_factor train to the end (27 trials: 6 of them; a quarter of random search's steps). "
        "Measured against the former default's ladder (rungs 9, 27, 81 of 243 keeping a third) it found better "
        "configs on 16 of 25 runs over three tasks and worse on 5, as later rungs ranked the good trials no "
        "better than the first (benchmarks/README.md, search quality). A number N: the first N rungs; all: "
        "every rung below max_steps (classic ASHA, with reduction_factor 3).",
    )
    startup_trials: int | None = Field(
        None,
        ge=0,
        description="asha only: the sweep's first N trials train to max_steps without being ranked at the rungs "
        "(as Optuna's MedianPruner lets its first 5 finish), so the search has full-length results before "
        "early evaluations decide; each costs a whole trial's steps. Default 0: the screen was measured best "
        "without them (with 4 of 27, TPE's good group held only those 4; benchmarks/README.md).",
    )

    @field_validator("rungs", mode="before")
    @classmethod
    def _count_or_all(cls, value: Any) -> Any:
        # One line for a bad value, not one per member of the union.
        if value is None or value == "all" or (type(value) is int and value >= 1):
            return value
        raise ValueError("must be a whole number >= 1, or all")

    def grace_period_for(self, max_steps: int, eval_every: int) -> int:
        """early_stopping.grace_period, or its default for training of `max_steps` steps
        evaluated every `eval_every`: the first rung where the trials' ranks are read,
        placed relative to max_steps (a fixed number of steps would judge a 2000-step run
        at 0.5 % of its training, when early losses mislead most) and on an evaluation."""
        if self.grace_period is not None:
            return self.grace_period
        return default_grace_period(max_steps, eval_every)

    def reduction_factor_for(self) -> float:
        """early_stopping.reduction_factor, or its default: 4 under the sweeper's ASHA (a
        screen keeping a quarter: about a quarter of random search's steps with the
        default grace period), 3 under Ray's ASHA (its rungs 1, 3, 9... of the grace period)."""
        if self.reduction_factor is not None:
            return self.reduction_factor
        return 4.0 if self.scheduler == "asha" else 3.0

    def rung_spacing_for(self) -> float:
        """early_stopping.rung_spacing, or its default: reduction_factor (ASHA's rungs)."""
        return self.rung_spacing if self.rung_spacing is not None else self.reduction_factor_for()

    def rung_count(self, searched: bool = True) -> int | None:
        """How many rungs rank the trials: early_stopping.rungs, its default (1 under the
        sweeper's ASHA), or None for every rung below max_steps (rungs: all, Ray's ASHA).
        `searched`: whether the sweep has search.parameters; a sweep of one config runs
        Ray's ASHA even under scheduler asha (search.make_scheduler)."""
        if self.rungs == "all" or self.scheduler != "asha" or not searched:
            return None
        return self.rungs if self.rungs is not None else 1

    def startup_trials_for(self) -> int:
        """early_stopping.startup_trials, or its default: none (benchmarks/README.md,
        search quality: the screen without them found better configs than the ladder with 4)."""
        if self.scheduler != "asha" or self.startup_trials is None:
            return 0
        return self.startup_trials


def default_grace_period(max_steps: int, eval_every: int) -> int:
    """max_steps / 27 rounded up to a multiple of eval_every: the first rung at about 4 %
    of training, as in the search-quality benchmark's task (243 steps: step 9;
    benchmarks/README.md)."""
    return max(1, math.ceil(max_steps / 27 / eval_every)) * eval_every


class TrackingSpec(StrictModel):
    uri: str | None = Field(
        None,
        description="MLflow tracking URI (sqlite:///..., http://host:5000, ...); default: "
        "sqlite:///mlflow.db in the working directory, artifacts in ./mlartifacts.",
    )
    experiment: str = Field("sweeper", min_length=1, description="MLflow experiment that holds the sweep's runs.")


class StorageSpec(StrictModel):
    uri: str | None = Field(
        None,
        description="Where Tune's experiment state and every trial's Train checkpoints go: a folder "
        "(default: the sweep folder, ./sweeps/<name>), a shared file-system path mounted on every node, "
        "or s3://bucket/prefix (endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY or AWS_PROFILE). A multi-node cluster needs s3:// or a shared path; "
        "resume, promote and report read the checkpoints from here.",
    )

    @field_validator("uri", mode="before")
    @classmethod
    def _folder_relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        from sweeper.cluster.storage import is_remote, uri_problem

        if value is None or not isinstance(value, str):
            return value
        problem = uri_problem(value)
        if problem:
            raise ValueError(problem)
        return value.rstrip("/") if is_remote(value) else str(resolve_relative_path(value, info))


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
    task: Task = Field(
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
    budget: BudgetSpec | None = Field(None, description="Caps on what the sweep may spend (none by default).")
    storage: StorageSpec = Field(default_factory=StorageSpec)
    output_dir: Path | None = Field(
        None, description="Where the sweep's files go (Tune results, checkpoints, Optuna study); default ./sweeps/<name>."
    )

    @field_validator("output_dir", mode="before")
    @classmethod
    def _relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_relative_path(value, info)

    @model_validator(mode="before")
    @classmethod
    def _dpo_defaults_for_dpo_task(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and raw.get("task") == "dpo" and raw.get("dpo") is None:
            return {**raw, "dpo": {}}
        return raw

    @property
    def sweep_dir(self) -> Path:
        return (self.output_dir or Path("sweeps") / self.name).resolve()

    @property
    def storage_uri(self) -> str:
        """Where Tune's state and the Train checkpoints go: storage.uri, else the sweep folder."""
        return self.storage.uri or str(self.sweep_dir)

    def trial_config(self) -> TrialConfig:
        """The sections every trial trains with, before its sampled values are applied
        (`TrialConfig.with_values`); the search, cost and tracking sections stay here."""
        return TrialConfig(
            task=self.task, model=self.model, data=self.data, training=self.training, lora=self.lora,
            dpo=self.dpo, resources=self.resources, chaos=self.chaos,
        )

    @model_validator(mode="after")
    def _cross_field_checks(self, info: ValidationInfo) -> "SweepSpec":
        problems = [
            *_metric_problems(self),
            *_schedule_problems(self),
            *_search_problems(self),
            *_cost_problems(self),
            *_task_problems(self),
            *trial_problems(self.model, self.training, self.resources),
            *(_output_dir_problems(self) if checks_files(info) else []),
            *budget_problems(self),
        ]
        if problems:
            raise FieldProblems(problems)
        return self


# A cross-field problem: (dotted YAML key, what is wrong and what would be valid).
Problem = tuple[str, str]


def _metric_problems(spec: SweepSpec) -> list[Problem]:
    metrics = TASK_METRICS[spec.task]
    if spec.search.metric not in metrics:
        return [(
            "search.metric",
            f"{spec.search.metric!r} is not reported by task {spec.task!r}; valid: {', '.join(metrics)}",
        )]
    goal = metrics[spec.search.metric]
    if spec.search.goal != goal:
        better = "lower" if goal == "minimize" else "higher"
        return [(
            "search.goal",
            f"{spec.search.metric} is better when {better}, got {spec.search.goal!r}; set search.goal: {goal}",
        )]
    return []


def _task_problems(spec: SweepSpec) -> list[Problem]:
    if spec.task != "dpo":
        given = ["dpo"] if spec.dpo is not None else []
        given += [f"search.parameters.{p}" for p in spec.search.parameters if p.split(".")[0] == "dpo"]
        return [(key, f"only task dpo reads dpo.*, got task {spec.task!r}; set task: dpo or remove it") for key in given]
    if spec.dpo.max_prompt_length >= spec.data.max_length:
        return [(
            "dpo.max_prompt_length",
            f"must be < data.max_length ({spec.data.max_length}), got {spec.dpo.max_prompt_length}; "
            "lower it or raise data.max_length",
        )]
    return []


def _schedule_problems(spec: SweepSpec) -> list[Problem]:
    stopping, training = spec.early_stopping, spec.training
    problems = []
    grace_period = stopping.grace_period_for(training.max_steps, training.eval_every)
    if stopping.scheduler != "none" and not training.eval_every <= grace_period < training.max_steps:
        if stopping.grace_period is not None:
            problems.append((
                "early_stopping.grace_period",
                f"must be >= training.eval_every ({training.eval_every}) "
                f"and < training.max_steps ({training.max_steps}), got {stopping.grace_period}",
            ))
        else:  # the default: an evaluation before the end is what a rung needs
            problems.append((
                "early_stopping.scheduler",
                f"{stopping.scheduler} ranks trials at an evaluation before training.max_steps "
                f"({training.max_steps}), and training.eval_every is {training.eval_every}; lower eval_every, "
                "raise max_steps, or set early_stopping.scheduler: none",
            ))
    # Only the sweeper's own ASHA places its rungs; Ray's ASHA (which also runs a sweep of one
    # config) spaces them by reduction_factor up to max_steps.
    for key, fix in (("rung_spacing", "remove it, or set reduction_factor instead"), ("rungs", "remove it")):
        if getattr(stopping, key) is not None and not (stopping.scheduler == "asha" and spec.search.parameters):
            problems.append((
                f"early_stopping.{key}",
                f"applies only to scheduler asha over search.parameters (Ray's ASHA, which also runs a sweep of "
                f"one config, spaces its rungs by reduction_factor), got scheduler {stopping.scheduler!r}"
                + ("" if spec.search.parameters else " and no search.parameters") + f"; {fix}",
            ))
    if stopping.startup_trials and stopping.scheduler != "asha":
        problems.append((
            "early_stopping.startup_trials",
            f"applies only to scheduler asha, got scheduler {stopping.scheduler!r}; remove it or set "
            "early_stopping.scheduler: asha",
        ))
    elif stopping.startup_trials is not None and stopping.startup_trials >= spec.search.num_trials:
        problems.append((
            "early_stopping.startup_trials",
            f"must be < search.num_trials ({spec.search.num_trials}), got {stopping.startup_trials}; with every "
            "trial a startup trial nothing is stopped early: set early_stopping.scheduler: none instead",
        ))
    return problems


def _cost_problems(spec: SweepSpec) -> list[Problem]:
    from sweeper.cost.prices import PRICE_TABLE

    known = {**PRICE_TABLE, **spec.cost.prices}
    accelerator = spec.cost.accelerator
    if accelerator is not None and accelerator not in known and spec.cost.usd_per_hour is None:
        return [("cost.accelerator", f"{accelerator!r} has no price; valid: {', '.join(known)}, or set cost.usd_per_hour")]
    return []


def _output_dir_problems(spec: SweepSpec) -> list[Problem]:
    """A new sweep folder must be creatable. An existing one is not checked here: the
    read-only commands read old sweeps wherever they lie (resume checks it can write)."""
    problem = folder_creation_problem(spec.sweep_dir)
    return [("output_dir", f"{problem}; give a folder you can write to")] if problem else []


def folder_creation_problem(folder: Path) -> str | None:
    """Why `folder` (absent, or present) cannot be created and written, or None."""
    if folder.exists():
        if not folder.is_dir():
            return f"{folder} is a file, not a folder"
        return None
    ancestor = folder.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create {folder}: {ancestor} is a file"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create {folder}: {ancestor} is read-only"
    return None


# Fields a trial cannot apply a sampled value of, with why and what to do instead.
NOT_SEARCHABLE: dict[str, str] = {
    "training.max_steps": (
        "every trial trains the same step budget, which ASHA's rungs, the cost forecast and the "
        "progress of trials are counted against; set training.max_steps once (early_stopping "
        "decides how long each trial trains)"
    ),
    "training.eval_every": (
        "every trial reports at the same steps, so that ASHA compares trials at its rungs; set "
        "training.eval_every once"
    ),
    "dpo.max_prompt_length": (
        "the data is tokenized once for the whole sweep, before any trial starts, so a trial "
        "cannot apply its own value; set dpo.max_prompt_length once, or run one sweep per value"
    ),
}


def _search_problems(spec: SweepSpec) -> list[Problem]:
    problems = []
    for path, dist in spec.search.parameters.items():
        key = f"search.parameters.{path}"
        if spec.dpo is None and path.split(".")[0] == "dpo":
            continue  # _task_problems says why
        if not _path_exists(spec, path):
            problems.append((key, f"no such config field; {_suggest_path(path)}"))
            continue
        if path.split(".")[0] not in SEARCHABLE_SECTIONS:
            problems.append((key, f"only {', '.join(s + '.*' for s in SEARCHABLE_SECTIONS)} can be searched"))
            continue
        if path in NOT_SEARCHABLE:
            problems.append((key, f"cannot be searched: {NOT_SEARCHABLE[path]}"))
            continue
        if _is_int_field(path) and isinstance(dist, (UniformDist, LogUniformDist)):
            problems.append((key, f"{path} is an integer; use distribution: int_uniform or categorical"))
            continue
        for value in _probe_values(dist):
            error = _override_error(spec, path, value)
            if error:
                problems.append((key, f"value {value!r} is invalid for {path}: {error}"))
                break
    if spec.search.method == "grid":
        not_categorical = [p for p, d in spec.search.parameters.items() if not isinstance(d, CategoricalDist)]
        if not_categorical:
            problems.append((
                "search.method",
                f"grid needs categorical values for every parameter, got ranges for {', '.join(not_categorical)}",
            ))
        elif spec.search.num_trials > grid_size(spec):
            problems.append((
                "search.num_trials", f"grid has {grid_size(spec)} points, got num_trials={spec.search.num_trials}"
            ))
    if not spec.search.parameters and spec.search.num_trials > 1:
        problems.append((
            "search.num_trials",
            "nothing to search (search.parameters is empty); set num_trials: 1 to "
            "train this config once, or add dotted paths to search.parameters",
        ))
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
    """The whole spec with dotted-path values applied and validated again (on the driver:
    exports and single runs; a trial applies its values with `TrialConfig.with_values`)."""
    raw = spec.model_dump(mode="python")
    for path, value in overrides.items():
        _set_path(raw, path, value)
    return SweepSpec.model_validate(raw, context={"check_files": False})


# The early_stopping section of a run that is no sweep (a single full run, a calibration
# run): nothing stopped early, and no startup trials, rung spacing or rung count (refused under
# scheduler none).
NO_EARLY_STOPPING = {"scheduler": "none", "startup_trials": None, "rung_spacing": None, "rungs": None}


def single_run_spec(spec: SweepSpec, params: dict[str, Any], name: str) -> SweepSpec:
    """A complete config that trains one trial's values (`params`: dotted path -> value, as
    sampled or as MLflow stored them) as a single full run: nothing searched or stopped
    early, output in ./sweeps/<name>. best_config.yaml and `sweep export` are this."""
    raw = with_overrides(spec, params).model_dump(mode="python")
    raw["name"] = name
    raw["search"] = {
        **raw["search"], "parameters": {}, "num_trials": 1, "max_concurrent_trials": None, "warm_start": [],
    }
    raw["early_stopping"] = {**raw["early_stopping"], **NO_EARLY_STOPPING}
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
    """The mapping in a YAML file; UserError for a file that is missing, unreadable, not
    YAML, not a mapping, or that gives a key twice (YAML itself would keep the last)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file; give the path of a sweep YAML file")
    try:
        loader = yaml.SafeLoader(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    try:
        node = loader.get_single_node()
        duplicates = _duplicate_keys(node, path.name)
        if duplicates:
            raise UserError(*duplicates)
        raw = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise UserError(f"{path}: invalid YAML at {where}: {exc.problem}") from None
    finally:
        loader.dispose()
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping of keys (name, data, search, ...), got {type(raw).__name__}")
    return raw


def _duplicate_keys(node: yaml.Node | None, file_name: str, prefix: str = "", seen_nodes: set | None = None) -> list[str]:
    """One keyed line per key given twice in the same mapping, anywhere in the document."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if node is None or id(node) in seen_nodes:  # an alias points at a node already walked
        return []
    seen_nodes.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        return [
            line for index, item in enumerate(node.value)
            for line in _duplicate_keys(item, file_name, f"{prefix}{index}.", seen_nodes)
        ]
    if not isinstance(node, yaml.MappingNode):
        return []
    problems, first_line = [], {}
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        line = key_node.start_mark.line + 1
        if key is not None and key != "<<" and key in first_line:
            problems.append(
                f"{prefix}{key}: given twice in {file_name}, at line {first_line[key]} and line {line}; keep one"
            )
        elif key is not None:
            first_line[key] = line
        problems += _duplicate_keys(value_node, file_name, f"{prefix}{key}.", seen_nodes)
    return problems


def validate_spec(raw: dict, base_dir: Path, source: str = "<yaml>") -> SweepSpec:
    try:
        return SweepSpec.model_validate(raw, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise UserError(*(line for err in exc.errors() for line in _format_error(err, raw))) from None


def _format_error(err: dict, raw: dict) -> list[str]:
    """The keyed lines of one pydantic error: one line, or one per problem that a
    cross-field validator raised (FieldProblems keys are relative to the error's location)."""
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
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldProblems):
        return [f"{'.'.join([*loc, sub_key])}: {message}" for sub_key, message in cause.problems]
    given = _value_at(raw, err["loc"])
    got = f" (got {given!r})" if given is not _MISSING else ""
    return [f"{key}: {_error_text(err)}{got}"]


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
