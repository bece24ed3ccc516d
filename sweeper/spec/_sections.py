"""The driver's own sections of the sweep file: the search (its distributions, method,
trial count and warm start), early_stopping, tracking, storage, cost and budget. The sections a
trial trains with live in `trainables/config.py`; `schema.SweepSpec` composes both."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationInfo, field_validator, model_validator

from trainables.sections import MAX_SEED, StrictModel, resolve_relative_path
from trainables.errors import FieldProblems


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
    # value -> the parameters (dotted path -> distribution) a trial searches only when it
    # draws that value: trl.method's choices, each with its own parameters.
    conditional: dict[Union[bool, int, float, str], dict[str, Distribution]] | None = None

    @field_validator("values", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        # One line for NaN or infinity, not one per member of the union.
        if isinstance(value, list) and any(isinstance(v, float) and not math.isfinite(v) for v in value):
            raise ValueError("must hold finite numbers, not .nan or .inf")
        return value


Distribution = Annotated[
    Union[UniformDist, LogUniformDist, IntUniformDist, CategoricalDist],
    Field(discriminator="distribution"),
]
CategoricalDist.model_rebuild()


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


# The most trials a sweep takes: as far as the forecast counts them (a count past it would
# keep `sweep plan` busy for minutes).
MOST_TRIALS = 1_000_000


class ObjectiveSpec(StrictModel):
    metric: str = Field(
        description="A reported metric (eval_loss, gen_exact_match, ...) or a trial's cost: cost_usd, "
        "accelerator_hours (GPU-hours; CPU core-hours without GPUs) or adapter_parameters (LoRA parameters)."
    )
    goal: Literal["minimize", "maximize"] = Field(description="Direction of `metric`.")


class ConfirmSpec(StrictModel):
    top: int = Field(ge=1, description="Off unless given. The best this-many configs of the search train again once it has ended: "
                     "ranked as early stopping ranks them (the furthest step first, then search.metric by its goal; "
                     "the first of search.objectives).")
    seeds: int = Field(description="New seeds each of them trains with, to training.max_steps: training.seed "
                       "+ 1, + 2, ... (at least 2: a mean's 95% interval needs two values).")

    @field_validator("seeds")
    @classmethod
    def _two_or_more(cls, value: int) -> int:
        if value < 2:
            raise ValueError("must be >= 2 (a mean's 95% interval needs two values)")
        return value


class SearchSpec(StrictModel):
    method: Literal["tpe", "random", "grid"] = Field(
        "tpe", description="Optuna sampler: tpe (default), random, or grid (categorical parameters only)."
    )
    metric: str = Field(
        "eval_loss",
        description="Reported metric to optimise: one the task reports at every evaluation (eval_loss, "
        "eval_perplexity, train_loss; DPO's eval_rewards_*; GRPO's eval_reward, its default with goal maximize), "
        "or a task metric from generation, gen_<score> (the generation section).",
    )
    goal: Literal["minimize", "maximize"] = Field("minimize", description="Direction of `metric`.")
    objectives: list[ObjectiveSpec] = Field(
        default_factory=list,
        description="Several objectives at once ([{metric, goal}, ...], two or more): Optuna's multi-objective "
        "search over them, the Pareto front in sweep status and the report. The first is search.metric (leave "
        "search.metric and goal out): early stopping and the best trial go by it.",
    )
    num_trials: int | None = Field(
        None,
        ge=1,
        le=MOST_TRIALS,
        description="Trials to run (for grid: at most the grid size); required unless a budget cap is given "
        "(budget.max_usd, max_hours, max_accelerator_hours or max_steps): without it, trials keep coming until "
        "the cap ends the sweep.",
    )
    max_concurrent_trials: int | None = Field(
        None, ge=1, description="Cap on trials at once; default: as many as the cluster fits."
    )
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Sampler seed: same seed, same sequence of configs.")
    max_failures: int = Field(
        1, ge=0,
        description="Retries of a failed trial (exception, NaN loss, lost process or node) from its last checkpoint "
        "(Tune's FailureConfig.max_failures). A several-worker trial whose workers cannot be placed and started "
        "within resources.worker_start_timeout_s fails, and is retried the same way.",
    )
    keep_best_adapters: int = Field(
        3, ge=1, description="Adapter checkpoints kept for the best this-many finished trials; the rest are deleted as the sweep goes."
    )
    parameters: dict[str, Distribution] = Field(
        default_factory=dict,
        description="Dotted config path (e.g. training.learning_rate) -> distribution: "
        "{distribution: uniform|log_uniform, low, high}, {distribution: int_uniform, low, "
        "high, step, log}, or {distribution: categorical, values: [...]}. A categorical may add "
        "conditional: {VALUE: {path: distribution, ...}}, parameters searched only in the trials that draw "
        "VALUE (one level deep; search.method tpe or random), e.g. trl.method: {distribution: categorical, "
        "values: [dpo, simpo], conditional: {dpo: {trl.beta: ...}, simpo: {trl.beta: ..., trl.simpo_gamma: "
        "...}}} (docs/guides/engines.md).",
    )
    warm_start: list[WarmStartSpec] = Field(
        default_factory=list,
        description="Earlier sweeps to start from: {sweep: NAME, top_k: N} or a list of them. Their finished "
        "trials are added to this search's study and their best top_k configs run first; parameters not in "
        "this search space, or out of its range, are left out (one note each).",
    )

    confirm: ConfirmSpec | None = Field(
        None,
        description="Confirmed winners: after the search, the best `top` configs train again to training.max_steps "
        "with `seeds` new seeds each ({top: 3, seeds: 3}); the winner is the config with the best mean, and sweep "
        "status and the report show each config's seeds, mean and 95% interval. The reruns count against the budget "
        "and are in the forecast. None (off) by default.",
    )

    @field_validator("warm_start", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="before")
    @classmethod
    def _first_objective_is_the_metric(cls, raw: Any) -> Any:
        objectives = raw.get("objectives") if isinstance(raw, dict) else None
        if not isinstance(objectives, list) or not objectives or not isinstance(objectives[0], dict):
            return raw
        first = objectives[0]
        given = {key: raw[key] for key in ("metric", "goal") if key in raw}
        wrong = [key for key, value in given.items() if value != first.get(key)]
        if wrong:
            raise FieldProblems([(key, f"with objectives the first objective is search.{key} "
                                       f"({first.get(key)!r}), got {raw[key]!r}; leave search.{key} out") for key in wrong])
        return {**raw, **{key: first[key] for key in ("metric", "goal") if key in first}}


class EarlyStoppingSpec(StrictModel):
    scheduler: Literal["asha", "asha_stopping", "median", "none"] = Field(
        "asha",
        description="Trial scheduler: asha (successive halving by promotion: a trial waits, paused, at each "
        "rung until it ranks in the best 1/eta there, so the sweep trains what the rung arithmetic says; "
        "each promotion of a paused trial costs one trial setup), asha_stopping (Ray's ASHA: decides when a "
        "trial arrives at a rung, no pauses, early arrivals go on), median stopping, or none.",
    )
    metric: str | None = Field(
        None,
        description="Reported metric the rungs rank trials by (its direction is the metric's own). Default: "
        "search.metric where every evaluation reports it, else eval_loss (a gen_ task metric generated only at "
        "the rungs or the end).",
    )
    grace_period: int | None = Field(
        None,
        ge=1,
        description="Steps every trial trains before it can be stopped (ASHA's r: the first rung). Default: "
        "training.max_steps / 27 rounded up to an evaluation, about 4% of training (243 steps, eval every 9: "
        "step 9; 90 steps, eval every 10: step 10); in a sweep without search.num_trials, which draws trials "
        "until a budget cap, max_steps / 9 (243 steps: step 27), as its many trials are all judged there.",
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
        "keeping half at each).",
    )
    rungs: int | Literal["all"] | None = Field(
        None,
        description="asha only: how many rungs rank the trials; from the last one the trials that go on train "
        "to max_steps. Default 1, a screen: every trial trains grace_period steps and the best "
        "1/reduction_factor train to the end (27 trials: 6 of them; a quarter of random search's steps). "
        "More rungs pay where a trial's early evaluations rank it poorly against its later ones only if the "
        "later rungs rank better; benchmarks/README.md (search quality) compares them. A number N: the first "
        "N rungs; all: every rung below max_steps (classic ASHA, with reduction_factor 3).",
    )
    startup_trials: int | None = Field(
        None,
        ge=0,
        description="asha only: the sweep's first N trials train to max_steps without being ranked at the rungs "
        "(as Optuna's MedianPruner lets its first 5 finish), so the search has full-length results before "
        "early evaluations decide; each costs a whole trial's steps. Default 0: full-length startup trials "
        "crowd TPE's good group (with 4 of 27 it can hold only those 4).",
    )

    @field_validator("rungs", mode="before")
    @classmethod
    def _count_or_all(cls, value: Any) -> Any:
        # One line for a bad value, not one per member of the union.
        if value is None or value == "all" or (type(value) is int and value >= 1):
            return value
        raise ValueError("must be a whole number >= 1, or all")

    def grace_period_for(self, max_steps: int, eval_every: int, until_a_cap: bool = False) -> int:
        """early_stopping.grace_period, or its default for training of `max_steps` steps
        evaluated every `eval_every` (`until_a_cap`: a sweep without search.num_trials): the
        first rung where the trials' ranks are read, placed relative to max_steps (a fixed
        number of steps would judge a 2000-step run at 0.5 % of its training, when early
        losses mislead most) and on an evaluation."""
        if self.grace_period is not None:
            return self.grace_period
        return default_grace_period(max_steps, eval_every, until_a_cap)

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
        """early_stopping.startup_trials, or its default: none."""
        if self.scheduler != "asha" or self.startup_trials is None:
            return 0
        return self.startup_trials


def default_grace_period(max_steps: int, eval_every: int, until_a_cap: bool = False) -> int:
    """max_steps / 27 rounded up to a multiple of eval_every: the first rung at about 4 %
    of training (243 steps: step 9). `until_a_cap` (a sweep that draws trials until a
    budget cap): max_steps / 9, about 11 %: such a sweep's extra trials are all judged at
    the rung and its TPE learns from their rung values, so the rung sits where a trial's
    loss ranks its final one better; benchmarks/README.md (search quality) measures both."""
    share = 9 if until_a_cap else 27
    return max(1, math.ceil(max_steps / share / eval_every)) * eval_every


class TrackingSpec(StrictModel):
    uri: str | None = Field(
        None,
        description="MLflow tracking URI (sqlite:///..., http://host:5000, ...); default: "
        "sqlite:///mlflow.db in the working directory, artifacts in ./mlartifacts.",
    )
    experiment: str = Field("sweeper", min_length=1, description="MLflow experiment that holds the sweep's runs.")
    away_limit_s: float = Field(
        1800, gt=0,
        description="How long a sweep goes on while its HTTP tracking server does not answer: what it could not log "
        "is kept in the sweep folder and logged once the server is back. Past this the sweep stops, resumable "
        "(sweep resume logs what was kept).",
    )


REMOTE_SCHEMES = ("s3", "gs", "gcs", "hdfs")


def is_remote(uri: str) -> bool:
    """Whether `uri` names object storage (s3://...) rather than a folder."""
    scheme, sep, _ = str(uri).partition("://")
    return bool(sep) and scheme in REMOTE_SCHEMES


def uri_problem(uri: str) -> str | None:
    """Why `uri` cannot be a sweep's storage (an unknown scheme), or None."""
    scheme, sep, rest = str(uri).partition("://")
    if sep and scheme not in REMOTE_SCHEMES:
        return f"unsupported scheme {scheme}://, expected a folder or one of " + ", ".join(f"{s}://" for s in REMOTE_SCHEMES)
    if sep and not rest.strip("/"):
        return f"{uri} names no bucket; expected {scheme}://bucket/prefix"
    return None


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
        if value is None or not isinstance(value, str):
            return value
        problem = uri_problem(value)
        if problem:
            raise ValueError(problem)
        return value.rstrip("/") if is_remote(value) else str(resolve_relative_path(value, info))


# On-demand USD per accelerator-hour (per CPU core-hour for "cpu"), approximate; the
# YAML's cost.prices overrides or extends these, cost.usd_per_hour overrides the lookup.
PRICE_TABLE: dict[str, float] = {
    "cpu": 0.05,
    "a10g": 1.0,
    "l4": 0.8,
    "l40s": 2.0,
    "a100-40gb": 2.5,
    "a100-80gb": 3.0,
    "h100": 5.0,
    "h200": 6.0,
    "rtx4090": 0.5,
}


class CostSpec(StrictModel):
    accelerator: str | None = Field(
        None,
        description="Price-table key: cpu, a10g, l4, l40s, a100-40gb, a100-80gb, h100, h200, rtx4090 "
        "(or one of cost.prices); default: cpu without GPUs, a100-80gb with. sweep start prices a GPU sweep "
        "by the card the cluster's GPUs report where the table knows it (cost.usd_per_hour fixes a price).",
    )
    usd_per_hour: float | None = Field(
        None, ge=0, description="Price per accelerator-hour (per CPU core-hour on CPU); overrides the table."
    )
    prices: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Extra or overriding price-table entries, USD per accelerator-hour (each >= 0).",
    )
    calibrate: bool = Field(
        True,
        description="sweep start: measure a few training steps before the sweep to forecast its time and cost "
        "(seconds of calibration); false forecasts from the throughput model (rougher, needs the model's size).",
    )

    def resolved_accelerator(self, use_gpu: bool) -> str:
        return self.accelerator or ("a100-80gb" if use_gpu else "cpu")


# The `budget` section: caps on what a sweep may spend. What they mean against the forecast
# and one trial's least cost is sweeper/plan/_caps.py; what enforces them while the sweep
# runs is sweeper/budget/_guard.py.
class BudgetSpec(StrictModel):
    max_usd: float | None = Field(
        None,
        gt=0,
        description="Cap on the sweep's cost in USD (trials' wall time x accelerators x price): no trial starts "
        "whose work to its next rung would cross it, and running trials stop when it is reached.",
    )
    max_hours: float | None = Field(
        None, gt=0, description="Cap on the sweep's wall-clock hours (from its start), enforced the same way."
    )
    max_accelerator_hours: float | None = Field(
        None,
        gt=0,
        description="Cap on accelerator-hours (GPU-hours, or CPU core-hours without GPUs), enforced the same way.",
    )
    max_steps: int | None = Field(
        None,
        ge=1,
        description="Cap on training steps (optimizer steps summed over the sweep's trials), enforced the same way: "
        "running trials stop within one evaluation interval of it.",
    )

    def caps(self) -> dict[str, float]:
        """The caps given: key -> value. (A guard that Tune pickled before a cap was added
        to this schema comes back without its field: not given.)"""
        caps = {key: getattr(self, key, None) for key in type(self).model_fields}
        return {key: value for key, value in caps.items() if value is not None}


