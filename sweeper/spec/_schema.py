"""The YAML contract: a pydantic schema that is the single source of truth for every key,
its default, its valid values and its help text (`sweep reference` prints it). The
sections a trial trains with are defined in `trainables/sections.py` and
`trainables/resources.py` (the trial contract, `trainables/config.py`), the driver's own
in `sections.py`; `SweepSpec` composes them and holds the cross-field rules, each a keyed
problem. No I/O beyond the trial sections' own file checks (under the `check_files`
context): the checks that read the model's config, the cache or the output folder run
after the schema, in `sweeper.plan._checks`.

`sweeper.spec._load.load_spec(path)` turns a YAML file into a validated `SweepSpec`; a
trial gets `SweepSpec.trial_config()` with its sampled values applied.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sweeper.spec._engines import engine_section_problems, grpo_defaults
from sweeper.spec._objectives import generation_problems, metric_problems, objectives_problems
from sweeper.spec._notify import NotifySpec
from sweeper.spec._paths import (_NO_VALUE, SEARCHABLE_SECTIONS, conditional_value, is_int_field, open_field_problem,
                                 override_error, path_exists, set_path, suggest_path)
from sweeper.spec._sections import (
    PRICE_TABLE,
    BudgetSpec,
    CategoricalDist,
    CostSpec,
    EarlyStoppingSpec,
    LogUniformDist,
    SearchSpec,
    StorageSpec,
    TrackingSpec,
    UniformDist,
)
from trainables.config import TrialConfig, trial_problems
from trainables.engines import Engine, FunctionSpec, TrlSpec
from trainables.resources import ResourcesSpec
from trainables.sections import ChaosSpec, DataSpec, DpoSpec, LoraSpec, ModelSpec, StrictModel, Task, TrainingSpec
from trainables.sections import resolve_relative_path
from trainables.errors import FieldProblems
from trainables.task_metrics import GenerationSpec


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
    trainer: Engine = Field(
        "builtin",
        description="What trains inside each trial: builtin (the sweeper's own loop for the task), trl (trl's "
        "trainer, picked by trl.method) or function (your own training function, function.entry_point). "
        "Search, rungs, MLflow, cost and reports are the same for each (docs/guides/engines.md).",
    )
    model: ModelSpec = Field(default_factory=ModelSpec)
    data: DataSpec
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    lora: LoraSpec = Field(default_factory=LoraSpec)
    dpo: DpoSpec | None = Field(None, description="Settings of task dpo (defaults apply when the section is left out).")
    trl: TrlSpec | None = Field(None, description="trl's trainer and its config fields (trainer: trl).")
    function: FunctionSpec | None = Field(None, description="Your own training function (trainer: function).")
    generation: GenerationSpec | None = Field(
        None,
        description="Task metrics from generation: greedy answers to a fixed sample of the eval split's prompts, "
        "scored against the references and reported as gen_<score> (search.metric may name one). None by default.",
    )
    search: SearchSpec = Field(default_factory=SearchSpec)
    early_stopping: EarlyStoppingSpec = Field(default_factory=EarlyStoppingSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    chaos: ChaosSpec = Field(default_factory=ChaosSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    cost: CostSpec = Field(default_factory=CostSpec)
    budget: BudgetSpec | None = Field(None, description="Caps on what the sweep may spend (none by default).")
    storage: StorageSpec = Field(default_factory=StorageSpec)
    notify: NotifySpec | None = Field(None, description="Webhooks the sweep posts its events to (none by default).")
    output_dir: Path | None = Field(
        None, description="Where the sweep's files go (Tune results, checkpoints, Optuna study); default ./sweeps/<name>."
    )

    @field_validator("output_dir", mode="before")
    @classmethod
    def _relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_relative_path(value, info)

    @model_validator(mode="before")
    @classmethod
    def _method_defaults(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and raw.get("task") == "dpo" and raw.get("dpo") is None:
            raw = {**raw, "dpo": {}}
        return grpo_defaults(raw)

    @property
    def sweep_dir(self) -> Path:
        return (self.output_dir or Path("sweeps") / self.name).resolve()

    @property
    def storage_uri(self) -> str:
        """Where Tune's state and the Train checkpoints go: storage.uri, else the sweep folder."""
        return self.storage.uri or str(self.sweep_dir)

    def grace_period(self) -> int:
        """The first rung's step: early_stopping.grace_period, or its default for this
        sweep's training and trial count (a sweep until a budget cap ranks later)."""
        return self.early_stopping.grace_period_for(
            self.training.max_steps, self.training.eval_every, until_a_cap=self.search.num_trials is None
        )

    def trial_config(self) -> TrialConfig:
        """The sections every trial trains with, before its sampled values are applied
        (`TrialConfig.with_values`); the search, cost and tracking sections stay here."""
        return TrialConfig(
            task=self.task, model=self.model, data=self.data, training=self.training, lora=self.lora,
            dpo=self.dpo, resources=self.resources, chaos=self.chaos, trainer=self.trainer, trl=self.trl,
            function=self.function,
        )

    @model_validator(mode="after")
    def _cross_field_checks(self) -> "SweepSpec":
        problems = [
            *_metric_problems(self),
            *_schedule_problems(self),
            *_search_problems(self),
            *_cost_problems(self),
            *_task_problems(self),
            *engine_section_problems(self),
            *trial_problems(self.model, self.training, self.resources),
        ]
        if problems:
            raise FieldProblems(problems)
        return self


# A cross-field problem: (dotted YAML key, what is wrong and what would be valid).
Problem = tuple[str, str]


def _metric_problems(spec: SweepSpec) -> list[Problem]:
    key = "search.objectives.0" if spec.search.objectives else "search"
    return [
        *metric_problems(spec, f"{key}.metric", spec.search.metric, spec.search.goal, f"{key}.goal"),
        *generation_problems(spec),
        *objectives_problems(spec),
    ]


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
    grace_period = spec.grace_period()
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
    elif (
        stopping.startup_trials is not None
        and spec.search.num_trials is not None
        and stopping.startup_trials >= spec.search.num_trials
    ):
        problems.append((
            "early_stopping.startup_trials",
            f"must be < search.num_trials ({spec.search.num_trials}), got {stopping.startup_trials}; with every "
            "trial a startup trial nothing is stopped early: set early_stopping.scheduler: none instead",
        ))
    return problems


def _cost_problems(spec: SweepSpec) -> list[Problem]:
    known = {**PRICE_TABLE, **spec.cost.prices}
    accelerator = spec.cost.accelerator
    if accelerator is not None and accelerator not in known and spec.cost.usd_per_hour is None:
        return [("cost.accelerator", f"{accelerator!r} has no price; valid: {', '.join(known)}, or set cost.usd_per_hour")]
    return []


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
        problems += _parameter_problems(spec, f"search.parameters.{path}", path, dist)
    problems += _conditional_problems(spec)
    if spec.search.method == "grid":
        not_categorical = [p for p, d in spec.search.parameters.items() if not isinstance(d, CategoricalDist)]
        if not_categorical:
            problems.append((
                "search.method",
                f"grid needs categorical values for every parameter, got ranges for {', '.join(not_categorical)}",
            ))
        elif spec.search.num_trials is not None and spec.search.num_trials > grid_size(spec):
            problems.append((
                "search.num_trials", f"grid has {grid_size(spec)} points, got num_trials={spec.search.num_trials}"
            ))
    if spec.search.num_trials is None and not (spec.budget and spec.budget.caps()):
        problems.append((
            "search.num_trials",
            "not given, and no budget cap; give a trial count or a budget cap (budget.max_usd, max_hours, "
            "max_accelerator_hours or max_steps: trials then run until it)",
        ))
    elif not spec.search.parameters and (spec.search.num_trials or 2) > 1:
        given = spec.search.num_trials or "none (trials until the budget cap)"
        problems.append((
            "search.num_trials",
            f"nothing to search (search.parameters is empty), got num_trials={given}; set num_trials: 1 to "
            "train this config once, or add dotted paths to search.parameters",
        ))
    return problems


def _parameter_problems(spec: SweepSpec, key: str, path: str, dist: Any) -> list[Problem]:
    """What is wrong with searching `dist` at `path` of `spec` (keyed `key`), at most one line."""
    if getattr(spec, path.split(".")[0], True) is None and path.split(".")[0] in ("dpo", "trl", "function"):
        return []  # _task_problems and engine_section_problems say why
    if not path_exists(spec, path):
        return [(key, f"no such config field; {suggest_path(path, spec)}")]
    if path.split(".")[0] not in SEARCHABLE_SECTIONS:
        return [(key, f"only {', '.join(s + '.*' for s in SEARCHABLE_SECTIONS)} can be searched")]
    if path in NOT_SEARCHABLE:
        return [(key, f"cannot be searched: {NOT_SEARCHABLE[path]}")]
    if is_int_field(path, spec) and isinstance(dist, (UniformDist, LogUniformDist)):
        return [(key, f"{path} is an integer; use distribution: int_uniform or categorical")]
    for value in _probe_values(dist):
        error = override_error(spec, path, value)
        if error:
            return [(key, f"value {value!r} is invalid for {path}: {error}")]
    return []


def _conditional_problems(spec: SweepSpec) -> list[Problem]:
    """The conditional parameters of each categorical (`conditional: {VALUE: {path: dist}}`),
    each checked as a searched parameter of the config with VALUE set (trl.beta under
    trl.method simpo is a field of CPOConfig); and, where trl.method is searched, each
    trl field searched for every method must be a field of each."""
    problems: list[Problem] = []
    top = spec.search.parameters
    for parent, dist in top.items():
        if not isinstance(dist, CategoricalDist) or not dist.conditional:
            continue
        if spec.search.method == "grid":
            problems.append(("search.method", f"grid draws every trial from one fixed grid; the conditional "
                                              f"parameters of search.parameters.{parent} need search.method tpe "
                                              "or random"))
        for given, parameters in dist.conditional.items():
            value = conditional_value(dist, given)
            if value is _NO_VALUE:
                problems.append((f"search.parameters.{parent}.conditional.{given}", f"not one of {parent}'s values: "
                                                   f"{', '.join(map(str, dist.values))}; use one of them"))
                continue
            branch = _spec_with(spec, parent, value)
            if branch is None:
                continue  # the value's own problem is keyed under search.parameters.<parent>
            for path, nested in parameters.items():
                if path in top:
                    problems.append((f"search.parameters.{parent}.conditional.{given}.{path}",
                                     f"{path} is searched for every trial too (search.parameters.{path}); search it "
                                     "in one place"))
                elif isinstance(nested, CategoricalDist) and nested.conditional:
                    problems.append((f"search.parameters.{parent}.conditional.{given}.{path}.conditional",
                                     f"conditional parameters are one level deep; move them up to "
                                     f"search.parameters.{parent}.conditional.{given}"))
                else:
                    problems += _parameter_problems(
                        branch, f"search.parameters.{parent}.conditional.{given}.{path}", path, nested
                    )
    method = top.get("trl.method")
    if spec.trainer == "trl" and spec.trl is not None and isinstance(method, CategoricalDist):
        # A field the YAML's own trl.method lacks is keyed already (_parameter_problems).
        searched = [p for p in top if p.startswith("trl.") and p != "trl.method" and not open_field_problem(spec, p)]
        for path in searched:
            for value in method.values:
                branch = _spec_with(spec, "trl.method", value)
                problem = open_field_problem(branch, path) if branch is not None else None
                if problem:
                    problems.append((f"search.parameters.{path}", f"searched for every trl.method, but {problem}; "
                                     f"search it under search.parameters.trl.method.conditional.<method> "
                                     "for the methods that have it"))
                    break
    return problems


def searched_paths(spec: SweepSpec) -> list[str]:
    """The dotted paths a trial may draw a value for, each once (conditional ones last)."""
    paths = list(spec.search.parameters)
    for dist in spec.search.parameters.values():
        for parameters in (dist.conditional or {}).values() if isinstance(dist, CategoricalDist) else ():
            paths += [path for path in parameters if path not in paths]
    return paths


def _spec_with(spec: SweepSpec, path: str, value: Any) -> SweepSpec | None:
    """`spec` with `value` at `path` (its section validated again), or None where the value
    is invalid there."""
    if override_error(spec, path, value) is not None:
        return None
    section = path.split(".", 1)[0]
    raw = spec.model_dump(mode="python").get(section) or {}
    set_path({section: raw}, path, value)
    updated = SEARCHABLE_SECTIONS[section].model_validate(raw, context={"check_files": False})
    return spec.model_copy(update={section: updated})


def most_trials(spec: SweepSpec) -> int | None:
    """The most trials the sweep runs: search.num_trials; under a budget cap without it, a
    grid's size, else None (trials keep coming until the cap)."""
    if spec.search.num_trials is not None:
        return spec.search.num_trials
    return grid_size(spec) if spec.search.method == "grid" else None


def evaluates_on_start(spec: SweepSpec) -> bool:
    """Whether each trial evaluates once before its first step (trl.eval_on_start, trainer
    trl): one more evaluation a trial, in its first Train run only."""
    return spec.trainer == "trl" and spec.trl is not None and bool(spec.trl.fields.get("eval_on_start"))


def trials_text(spec: SweepSpec) -> str:
    """`8 trials`; `trials until budget.max_steps: 300` for a sweep that runs until a cap."""
    trials = most_trials(spec)
    if spec.search.num_trials is None and spec.budget is not None:
        caps = ", ".join(f"budget.{key}: {value:g}" for key, value in spec.budget.caps().items())
        return f"trials until {caps}" + (f" (at most the grid's {trials})" if trials else "")
    return f"{trials} trials"


def grid_size(spec: SweepSpec) -> int:
    return math.prod(len(d.values) for d in spec.search.parameters.values() if isinstance(d, CategoricalDist))


def _probe_values(dist: Any) -> list[Any]:
    """Values that bound what a distribution can sample: both ends of a range, every category."""
    if isinstance(dist, CategoricalDist):
        return list(dist.values)
    return [dist.low, dist.high]
