"""The JSON documents of the commands, one pydantic model each: the model is the schema
(its fields' descriptions are the reference page, `markdown_schema`), and each builder
fills it from what the command already holds and returns it as one line of JSON.

Every document opens with `schema_version` and `command`. The version changes when a field
is renamed, removed or changes meaning; a field added leaves it as it is.
"""

from __future__ import annotations

import json
import typing
from datetime import datetime, timezone
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from sweeper.names import RunMetric, Tag, TrialState

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Document(_Model):
    schema_version: int = Field(SCHEMA_VERSION, description="The schema's version (this page's).")
    command: str = Field(description="The command that wrote the document.")


# ---------------------------------------------------------------- validate


class ValidateDocument(_Document):
    """`sweep validate FILE --json`: the sweep file is valid."""

    file: str = Field(description="The sweep file, as given.")
    name: str = Field(description="The sweep's name.")
    task: str = Field(description="What each trial trains (sft, dpo, ...).")
    num_trials: Optional[int] = Field(description="search.num_trials; null: trials come until a budget cap ends the sweep.")
    trials: str = Field(description="How many trials, in words, as the terminal line says it.")
    searched: list[str] = Field(description="The searched parameters, by dotted path.")
    memory: Optional[str] = Field(description="The memory forecast of one trial on its GPU; null without a GPU.")
    notes: list[str] = Field(description="Notes on a warm start (search.warm_start), as printed to stderr.")


def validate_document(file, spec, trials_text: str, searched: list[str], memory, notes: list[str]) -> str:
    return ValidateDocument(
        command="validate", file=str(file), name=spec.name, task=spec.task, num_trials=spec.search.num_trials,
        trials=trials_text, searched=list(searched), memory=memory.describe() if memory is not None else None,
        notes=list(notes),
    ).model_dump_json()


# ---------------------------------------------------------------- plan


class Scenario(_Model):
    steps: int = Field(description="Training steps over all trials.")
    wall_seconds: float = Field(description="The sweep's wall time.")
    accelerator_hours: float = Field(description="GPU-hours, or CPU core-hours without a GPU.")
    usd: float = Field(description="Cost in US dollars at the sweep's price.")


class Rung(_Model):
    step: int = Field(description="A rung's training step.")
    trials: int = Field(description="The trials expected to train to it.")


class Timing(_Model):
    step_seconds: float = Field(description="One optimizer step.")
    eval_seconds: float = Field(description="One evaluation, with its report and checkpoint.")
    setup_seconds: float = Field(description="One trial's start.")
    process_start_seconds: float = Field(description="Once per trial process where trials reuse one; else 0.")
    source: str = Field(description="Where the figures come from, in words (calibration or the throughput model).")


class Price(_Model):
    accelerator: str = Field(description="The price table's accelerator (cost.accelerator).")
    usd_per_hour: float = Field(description="USD per accelerator-hour.")
    accelerators_per_trial: float = Field(description="Accelerators (GPUs, else CPU cores) one trial holds.")
    unit: str = Field(description="What accelerator_hours count: GPU-hours or CPU core-hours.")


class Cap(_Model):
    key: str = Field(description="The cap's key under budget (max_usd, max_hours, max_accelerator_hours, max_steps).")
    cap: float = Field(description="The cap's value.")
    expected: float = Field(description="The expected sweep, without the caps, in the cap's unit.")
    without_early_stopping: float = Field(description="Every trial to max_steps, in the cap's unit.")


class PlanDocument(_Document):
    """`sweep plan FILE --json`: the forecast (the terminal lines go to stderr)."""

    file: str = Field(description="The sweep file, as given.")
    name: str = Field(description="The sweep's name.")
    trials: str = Field(description="How many trials, in words.")
    concurrent_trials: int = Field(description="Trials that run at once on the cluster.")
    timing: Timing = Field(description="The step, evaluation and start times the forecast uses.")
    price: Price = Field(description="The price it counts with.")
    ladder: list[Rung] = Field(description="The step budget by rung.")
    expected: Scenario = Field(description="The expected sweep, cut where a budget cap ends it.")
    without_early_stopping: Scenario = Field(description="Every trial to training.max_steps.")
    cut_by: Optional[str] = Field(description="The budget cap expected to end the sweep; null: none.")
    bought_trials: Optional[int] = Field(description="A sweep without search.num_trials: the trials its caps buy.")
    confirm_trials: int = Field(description="search.confirm's reruns, counted in the scenarios.")
    caps: list[Cap] = Field(description="Each budget cap against the forecast.")
    notes: list[str] = Field(description="The forecast's notes (calibration time, ...).")


def plan_document(file, spec, forecast, trials_text: str) -> str:
    timing, rate = forecast.timing, forecast.rate
    caps = spec.budget.caps() if spec.budget is not None else {}
    return PlanDocument(
        command="plan", file=str(file), name=spec.name, trials=trials_text, concurrent_trials=forecast.slots,
        timing=Timing(step_seconds=timing.step_seconds, eval_seconds=timing.eval_seconds,
                      setup_seconds=timing.setup_seconds, process_start_seconds=timing.process_start_seconds,
                      source=timing.source),
        price=Price(accelerator=rate.accelerator, usd_per_hour=rate.usd_per_hour,
                    accelerators_per_trial=rate.accelerators_per_trial,
                    unit="GPU-hours" if spec.resources.use_gpu else "CPU core-hours"),
        ladder=[Rung(step=step, trials=n) for step, n in forecast.ladder],
        expected=_scenario(forecast.expected), without_early_stopping=_scenario(forecast.worst),
        cut_by=forecast.cut_by, bought_trials=forecast.bought_trials, confirm_trials=forecast.confirm_trials,
        caps=[Cap(key=key, cap=cap, expected=forecast.uncapped.value(key), without_early_stopping=forecast.worst.value(key))
              for key, cap in caps.items()],
        notes=list(forecast.notes),
    ).model_dump_json()


def _scenario(s) -> Scenario:
    return Scenario(steps=s.steps, wall_seconds=s.wall_seconds, accelerator_hours=s.accelerator_hours, usd=s.usd)


# ---------------------------------------------------------------- status and list


class Trial(_Model):
    number: int = Field(description="The trial's number, as `sweep status` shows it.")
    trial_id: Optional[str] = Field(description="Tune's trial id.")
    state: str = Field(description="running, paused, completed, pruned, stopped or failed.")
    status: str = Field(description="The state in words, as the table shows it (`pruned at step 10`).")
    steps: Optional[int] = Field(description="Steps trained (the latest report's while it runs).")
    metric: Optional[float] = Field(description="The trial's last value of the sweep's metric.")
    cost_usd: Optional[float] = Field(description="What the trial cost; null until it ends.")
    wall_seconds: Optional[float] = Field(description="The trial's wall time; null until it ends.")
    params: dict[str, typing.Any] = Field(description="The searched values it trained with (numbers as numbers).")
    warm_start: Optional[str] = Field(description="The earlier sweep's trial that gave its config; null: none.")
    startup_trial: bool = Field(description="One of early_stopping.startup_trials (trained to the end unranked).")
    confirms: Optional[int] = Field(description="search.confirm: the trial number whose config it trains again.")


class StatusDocument(_Document):
    """`sweep status NAME --json`: every trial of the sweep (during and after it)."""

    name: str = Field(description="The sweep's name.")
    status: str = Field(description="The sweep's status (running, finished, stopped, failed, ...).")
    metric: str = Field(description="The metric trials are ranked by.")
    goal: str = Field(description="minimize or maximize.")
    cost_usd: Optional[float] = Field(description="The sweep's cost; null until it ends.")
    saved_by_pruning_usd: Optional[float] = Field(description="What early stopping saved; null until it ends.")
    pareto_front: Optional[list[int]] = Field(
        description="search.objectives: the trial numbers on the Pareto front; null for one objective.")
    trials: list[Trial] = Field(description="Every trial, in trial order (all of them, not the table's selection).")


def status_document(run, trials, front=None) -> str:
    tags, metrics = run.data.tags, run.data.metrics
    numbers = dict(zip(trials["trial_id"], trials["trial_number"]))
    return StatusDocument(
        command="status", name=tags.get(Tag.SWEEP_NAME), status=tags.get(Tag.STATUS, run.info.status.lower()),
        metric=tags.get(Tag.METRIC, "eval_loss"), goal=tags.get(Tag.GOAL, "minimize"),
        cost_usd=metrics.get(RunMetric.COST_USD_TOTAL), saved_by_pruning_usd=metrics.get(RunMetric.SAVED_BY_PRUNING_USD),
        pareto_front=[numbers.get(t) for t in front.front] if front is not None else None,
        trials=[
            Trial(number=row["trial_number"], trial_id=row["trial_id"], state=row["state"], status=row["status"],
                  steps=row["steps"], metric=row["metric"], cost_usd=row["cost_usd"], wall_seconds=row["wall_seconds"],
                  params={k: _value(v) for k, v in json.loads(row["params"]).items()}, warm_start=row["warm_start"],
                  startup_trial=row["startup_trial"], confirms=row.get("confirms"))
            for row in trials.iter_rows(named=True)
        ],
    ).model_dump_json()


def _value(text: str):
    """An MLflow param (text) as the value it was: an int, a float, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class Sweep(_Model):
    name: str = Field(description="The sweep's name (its latest run).")
    status: str = Field(description="running, finished, stopped, failed, ...")
    trials: int = Field(description="Trials started.")
    metric: str = Field(description="The metric trials are ranked by.")
    best: Optional[float] = Field(description="The best trial's metric; null: none yet.")
    cost_usd: Optional[float] = Field(description="The sweep's cost; null until it ends.")
    started: str = Field(description="When it started, ISO 8601 in UTC.")
    run_id: str = Field(description="Its MLflow parent run.")


class ListDocument(_Document):
    """`sweep list --json`: the sweeps in the MLflow store, newest first."""

    sweeps: list[Sweep] = Field(description="One entry per sweep name.")


def list_document(sweeps) -> str:
    return ListDocument(command="list", sweeps=[
        Sweep(name=row["sweep"], status=row["status"], trials=row["trials"], metric=row["metric"], best=row["best"],
              cost_usd=row["cost_usd"], run_id=row["run_id"],
              started=datetime.fromtimestamp(row["started"] / 1000, timezone.utc).isoformat(timespec="seconds"))
        for row in sweeps.iter_rows(named=True)
    ]).model_dump_json()


# ---------------------------------------------------------------- the end of a sweep


class Counts(_Model):
    total: int = Field(description="Trials started.")
    completed: int = Field(description="Trained to the end.")
    pruned: int = Field(description="Stopped early by ASHA.")
    failed: int = Field(description="Failed (their reason in `sweep status`).")
    unfinished: int = Field(description="Not ended: a stopped sweep's, which `sweep resume` continues.")


class BestTrial(_Model):
    number: int = Field(description="The best completed trial's number.")
    trial_id: str = Field(description="Its Tune trial id.")
    value: Optional[float] = Field(description="Its last value of the metric.")
    params: dict[str, typing.Any] = Field(description="Its searched values.")


class Cost(_Model):
    usd: float = Field(description="What the sweep cost.")
    accelerator_hours: float = Field(description="GPU-hours, or CPU core-hours without a GPU.")
    tokens: float = Field(description="Training tokens processed.")
    saved_by_pruning_usd: float = Field(description="What early stopping saved.")


class SummaryDocument(_Document):
    """`sweep start|resume --summary-json PATH`: the end-of-sweep summary, written before
    the command exits (also when it stopped or failed)."""

    name: str = Field(description="The sweep's name.")
    outcome: Literal["finished", "stopped", "fault", "no_trial_completed"] = Field(
        description="finished: a trial completed; stopped: `sweep stop`, Ctrl-C or SIGTERM; fault: a fault stopped "
        "it (message says what, `sweep resume` continues); no_trial_completed: every trial failed or was pruned.")
    exit_status: int = Field(description="The command's exit status (the exit status table).")
    message: Optional[str] = Field(description="The line the terminal showed for a fault or no completed trial.")
    wall_seconds: float = Field(description="The sweep's wall time.")
    metric: str = Field(description="The metric trials are ranked by.")
    goal: str = Field(description="minimize or maximize.")
    trials: Counts = Field(description="Trials by how they ended.")
    best: Optional[BestTrial] = Field(description="The best completed trial; null: none completed.")
    cost: Cost = Field(description="The sweep's cost.")
    notes: list[str] = Field(description="The summary's notes (forecast against actual, what a budget cut).")
    tracking_uri: str = Field(description="The MLflow store.")
    experiment: str = Field(description="The MLflow experiment.")
    sweep_dir: str = Field(description="The sweep's folder.")


def summary_document(command: str, run, outcome: str, exit_status: int, message: str | None) -> str:
    book, spec, cost = run.book, run.spec, run.cost
    best = book.best()
    return SummaryDocument(
        command=command, name=spec.name, outcome=outcome, exit_status=exit_status, message=message,
        wall_seconds=run.wall_seconds, metric=book.metric, goal=book.goal,
        trials=Counts(total=len(book.trials), completed=book.count(TrialState.COMPLETED),
                      pruned=book.count(TrialState.PRUNED), failed=book.count(TrialState.FAILED),
                      unfinished=sum(not t.finished for t in book.trials.values())),
        best=BestTrial(number=best.number, trial_id=best.trial_id, value=best.last(book.metric),
                       params=dict(best.params)) if best else None,
        cost=Cost(usd=cost.usd, accelerator_hours=cost.accelerator_hours, tokens=cost.tokens,
                  saved_by_pruning_usd=cost.saved_by_pruning_usd),
        notes=list(getattr(run, "notes", [])), tracking_uri=str(run.tracking_uri),
        experiment=spec.tracking.experiment, sweep_dir=str(spec.sweep_dir),
    ).model_dump_json()


# ---------------------------------------------------------------- a refusal


class Error(_Model):
    exit_status: int = Field(description="The command's exit status: 2 for your input, 1 for a sweep that failed.")
    lines: list[str] = Field(description="The keyed lines stderr shows (`KEY: what is wrong, got VALUE; the fix`).")


class ErrorDocument(_Document):
    """Any `--json` command that refuses (bad input, a sweep or store not found): the
    keyed lines, on stdout as JSON and on stderr as text, and the same exit status."""

    error: Error = Field(description="What was refused.")


def error_document(command: str, exit_status: int, lines: list[str]) -> str:
    return ErrorDocument(command=command, error=Error(exit_status=exit_status, lines=list(lines))).model_dump_json()


# ---------------------------------------------------------------- the reference page


DOCUMENTS = [ValidateDocument, PlanDocument, StatusDocument, ListDocument, SummaryDocument, ErrorDocument]


def markdown_schema() -> str:
    """Every document's fields as a Markdown table (docs/reference/json.md)."""
    parts = []
    for document in DOCUMENTS:
        title = document.__doc__.split(":", 1)
        parts += [f"## {title[0]}", "", _sentence(title[1]) if len(title) > 1 else "", "",
                  "| field | type | meaning |", "|---|---|---|", *_rows(document, ""), ""]
    return "\n".join(parts)


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text[:1].upper() + text[1:]


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        path, kind = f"{prefix}{name}", field.annotation
        inner = _nested(kind)
        rows.append(f"| `{path}` | {_type_name(kind)} | {field.description or ''} |")
        if inner is not None:
            rows += _rows(inner, f"{path}[]." if typing.get_origin(kind) is list else f"{path}.")
    return rows


def _nested(kind) -> type[BaseModel] | None:
    for candidate in (kind, *typing.get_args(kind)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        if typing.get_origin(candidate) is list:
            return _nested(typing.get_args(candidate)[0])
    return None


def _type_name(kind) -> str:
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) is Literal:
        return " or ".join(f"`{a}`" for a in typing.get_args(kind))
    if typing.get_origin(kind) is list:
        return f"list of {_type_name(args[0])}"
    if typing.get_origin(kind) is dict:
        return "object"
    if type(None) in typing.get_args(kind):
        return f"{_type_name(args[0])} or null"
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return "object"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(kind, str(kind))
