"""Rich tables of what the store holds (for `sweep list` and `sweep status`), and the
style of each trial state wherever a table shows one."""

from __future__ import annotations

import json
from datetime import datetime

import polars as pl
from rich.table import Table

from sweeper.names import RunMetric, Tag, TrialState
from trainables.metrics import EVAL_LOSS

STATE_STYLE = {
    TrialState.RUNNING: "cyan",
    TrialState.PAUSED: "blue",
    TrialState.COMPLETED: "green",
    TrialState.PRUNED: "yellow",
    TrialState.FAILED: "red",
}


def usd(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 1 else f"${value:.6f}"


def duration(seconds: float) -> str:
    """`45 s`, `3 min 10 s`, `2 h 05 min`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def sweeps_table(sweeps: pl.DataFrame) -> Table:
    table = Table(title="Sweeps", title_justify="left")
    for column in ("sweep", "status", "trials", "best", "cost", "started"):
        table.add_column(column, justify="right" if column in ("trials", "best", "cost") else "left")
    for row in sweeps.iter_rows(named=True):
        started = datetime.fromtimestamp(row["started"] / 1000).strftime("%Y-%m-%d %H:%M")
        best = f"{row['metric']}={_num(row['best'])}" if row["best"] is not None else "-"
        table.add_row(row["sweep"], row["status"], str(row["trials"]), best, usd(row["cost_usd"]), started)
    return table


# `sweep status` shows every trial of a sweep up to this many; beyond, the running ones
# and the BEST_SHOWN best of the others (`sweep status NAME --all` and the report show all).
ALL_TRIALS_UP_TO = 50
BEST_SHOWN = 20


def trials_shown(run, trials: pl.DataFrame, show_all: bool = False) -> tuple[pl.DataFrame, str | None]:
    """The trials `sweep status` shows, in trial order, and a note saying what it left out
    (None when it shows them all)."""
    if show_all or trials.height <= ALL_TRIALS_UP_TO:
        return trials, None
    metric = run.data.tags.get(Tag.METRIC, EVAL_LOSS)
    running = trials.filter(pl.col("state") == TrialState.RUNNING)
    best = (
        trials.filter((pl.col("state") != TrialState.RUNNING) & pl.col("metric").is_not_null())
        .sort("metric", descending=run.data.tags.get(Tag.GOAL) == "maximize")
        .head(BEST_SHOWN)
    )
    shown = pl.concat([running, best]).sort("trial_number")
    counts = ", ".join(f"{n} {state}" for state, n in trials["state"].value_counts(sort=True).iter_rows())
    note = (
        f"{shown.height} of {trials.height} trials shown ({counts}): the running ones and the {best.height} "
        f"best by {metric}. Every trial: sweep status {run.data.tags.get(Tag.SWEEP_NAME)} --all"
    )
    return shown, note


def trials_table(run, trials: pl.DataFrame) -> Table:
    tags, metrics = run.data.tags, run.data.metrics
    metric = tags.get(Tag.METRIC, EVAL_LOSS)
    title = f"Sweep {tags.get(Tag.SWEEP_NAME)!r}: {tags.get(Tag.STATUS, run.info.status.lower())}"
    if RunMetric.COST_USD_TOTAL in metrics:
        saved = usd(metrics.get(RunMetric.SAVED_BY_PRUNING_USD))
        title += f"; cost {usd(metrics[RunMetric.COST_USD_TOTAL])}, pruning saved {saved}"
    table = Table(title=title, title_justify="left")
    param_names = list(json.loads(tags.get(Tag.SEARCH_SPACE, "{}")))
    table.add_column("trial", justify="right")
    table.add_column("status")
    for name in param_names:
        table.add_column(name, justify="right")
    for column in ("steps", metric, "cost"):
        table.add_column(column, justify="right")
    warm_started = trials["warm_start"].is_not_null().any()
    if warm_started:
        table.add_column("warm start from")
    # Says why a poor trial went on past a rung: early_stopping.startup_trials.
    with_startup = trials["startup_trial"].any()
    if with_startup:
        table.add_column("startup trial")
    # search.confirm: a rerun says which search trial's config it trains again, and its seed.
    reruns = "confirms" in trials.columns and trials["confirms"].is_not_null().any()
    if reruns:
        table.add_column("rerun of")
    for row in trials.iter_rows(named=True):
        params = json.loads(row["params"])
        style = STATE_STYLE.get(row["state"], "")
        table.add_row(
            str(row["trial_number"]),
            f"[{style}]{row['status']}[/{style}]" if style else row["status"],
            *(_short(params.get(name)) for name in param_names),
            "-" if row["steps"] is None else str(row["steps"]),
            _num(row["metric"]),
            usd(row["cost_usd"]),
            *([row["warm_start"] or "-"] if warm_started else []),
            *(["yes" if row["startup_trial"] else "-"] if with_startup else []),
            *([f"{row['confirms']}, seed {params.get('training.seed')}" if row["confirms"] is not None else "-"]
              if reruns else []),
        )
    return table


def _short(value: str | None) -> str:
    if value is None:
        return "-"
    try:
        return f"{float(value):.4g}"
    except ValueError:
        return value


def front_table(front, trials: pl.DataFrame) -> Table:
    """The Pareto front of a sweep of several objectives (search.objectives; `front`, a
    sweeper.search.Front read from its Optuna study): one row per trial on the front, its
    values of every objective."""
    numbers = dict(zip(trials["trial_id"], trials["trial_number"]))
    objectives = ", ".join(f"{m} ({g})" for m, g in zip(front.metrics, front.goals))
    table = Table(title=f"Pareto front: {len(front.front)} of {len(front.points)} completed trials; {objectives}",
                  title_justify="left")
    table.add_column("trial", justify="right")
    for metric in front.metrics:
        table.add_column(metric, justify="right")
    values = dict(front.points)
    for trial_id in front.front:
        table.add_row(str(numbers.get(trial_id, trial_id)), *(_num(v) for v in values[trial_id]))
    return table
