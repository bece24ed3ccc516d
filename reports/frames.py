"""Report frames: pure polars transforms of what the store returned (no MLflow here), so
each table and plot of a report is built, and tested, from small frames."""

from __future__ import annotations

import json

import polars as pl

from reports.data import SweepData
from sweeper.names import TrialState
from sweeper.track import best_trial_row
from sweeper.views import usd

__all__ = [
    "leaderboard", "best_so_far", "cost_summary", "config_diff", "best_trials",
    "best_trial_number", "display", "params_text", "number", "metric_text", "usd",
]

# Completed trials rank first (by the metric), then pruned ones (deeper first: their
# metric is from fewer steps), then the rest.
STATE_ORDER = {
    TrialState.COMPLETED: 0,
    TrialState.PRUNED: 1,
    TrialState.RUNNING: 2,
    TrialState.PAUSED: 2,
    TrialState.STOPPED: 3,
    TrialState.FAILED: 4,
}


def _sign(data: SweepData) -> int:
    return 1 if data.record.minimize else -1


def best_trial_number(data: SweepData) -> int | None:
    """The best completed trial (the sweep's own definition of best)."""
    best = best_trial_row(data.trials, data.record.goal)
    return best["trial_number"] if best else None


def leaderboard(data: SweepData) -> pl.DataFrame:
    """rank, trial, status, one column per parameter, the metric (final value), the best
    value seen during training, steps trained, cost, `warm start from` (in a sweep with
    warm-started trials), and the state (for styling)."""
    metric = data.record.metric
    trials = data.trials
    warm_start = ["warm_start"] if "warm_start" in trials.columns and trials["warm_start"].is_not_null().any() else []
    value = pl.col("value")
    best_seen = data.history.group_by("trial_number").agg(
        (value.min() if data.record.minimize else value.max()).alias(f"best {metric} seen")
    )
    ranked = (
        data.trials.select("trial_number", "state", "status", "metric", "steps", "cost_usd", *warm_start)
        .join(data.params, on="trial_number", how="left")
        .join(best_seen, on="trial_number", how="left")
        .with_columns(
            pl.col("state").replace_strict({str(k): v for k, v in STATE_ORDER.items()}, default=len(STATE_ORDER))
            .alias("_group"),
            (pl.col("metric") * _sign(data)).alias("_key"),
        )
        .sort(["_group", "steps", "_key"], descending=[False, True, False], nulls_last=True)
        .with_row_index("rank", offset=1)
    )
    return ranked.select(
        pl.col("rank").cast(pl.Int64),
        pl.col("trial_number").alias("trial"),
        "status",
        *data.param_names,
        pl.col("metric").alias(metric),
        f"best {metric} seen",
        "steps",
        pl.col("cost_usd").alias("cost"),
        # Only in a warm-started sweep: the earlier sweep's trial that gave the config.
        *(pl.col(column).alias("warm start from") for column in warm_start),
        "state",
    )


def best_so_far(data: SweepData) -> pl.DataFrame:
    """Trials in the order they ended: cumulative cost, wall seconds since the sweep
    started, and the best completed metric so far (null until a trial completes)."""
    completed_metric = pl.when(pl.col("state") == TrialState.COMPLETED).then(pl.col("metric").cast(pl.Float64))
    best = completed_metric.cum_min() if data.record.minimize else completed_metric.cum_max()
    return (
        data.trials.filter(pl.col("ended_ms").is_not_null())
        .sort("ended_ms")
        .select(
            pl.lit(data.name).alias("sweep"),
            "trial_number",
            "state",
            "metric",
            pl.col("cost_usd").fill_null(0).cum_sum().alias("cumulative_cost_usd"),
            ((pl.col("ended_ms") - data.record.started_ms) / 1000).alias("wall_seconds"),
            best.forward_fill().alias("best_so_far"),
        )
    )


def cost_summary(data: SweepData) -> dict[str, float | None]:
    """The sweep's cost totals from its parent run; summed from the trials while it runs."""
    totals, trials = data.record.totals, data.trials
    spent = totals.get("cost_usd_total", trials["cost_usd"].sum())
    saved = totals.get("cost_usd_saved_by_pruning", trials["saved_usd"].sum())
    without = spent + saved
    return {
        "cost_usd": spent,
        "saved_by_pruning_usd": saved,
        "without_pruning_usd": without,
        "saved_share": saved / without if without else 0.0,
        "accelerator_hours": totals.get("accelerator_hours_total"),
        "tokens": totals.get("tokens_total", trials["tokens"].sum()),
        "usd_per_million_tokens": totals.get("usd_per_million_tokens"),
        "wall_seconds": totals.get("wall_seconds"),
    }


def config_diff(sweeps: list[SweepData]) -> pl.DataFrame:
    """Config keys whose values differ between the sweeps: key, then one column per sweep."""
    keys = sorted({key for data in sweeps for key in data.record.config} - {"name"})
    rows = []
    for key in keys:
        values = [data.record.config.get(key, "-") for data in sweeps]
        if len(set(values)) > 1:
            rows.append({"key": key, **{data.name: value for data, value in zip(sweeps, values)}})
    return pl.DataFrame(rows, schema={"key": pl.String, **{data.name: pl.String for data in sweeps}})


def best_trials(sweeps: list[SweepData]) -> pl.DataFrame:
    """Each sweep's best completed trial, side by side with the sweep's totals."""
    rows = []
    for data in sweeps:
        number = best_trial_number(data)
        best = data.trials.filter(pl.col("trial_number") == number).row(0, named=True) if number else {}
        costs = cost_summary(data)
        rows.append({
            "sweep": data.name,
            "best trial": number,
            "metric": data.record.metric,
            "value": best.get("metric"),
            "steps": best.get("steps"),
            "parameters": params_text(best["params"]) if best else "-",
            "trial cost": best.get("cost_usd"),
            "trials": data.trials.height,
            "completed": data.count(TrialState.COMPLETED),
            "pruned": data.count(TrialState.PRUNED),
            "sweep cost": costs["cost_usd"],
            "saved by pruning": costs["saved_by_pruning_usd"],
        })
    return pl.DataFrame(rows, schema={
        "sweep": pl.String, "best trial": pl.Int64, "metric": pl.String, "value": pl.Float64, "steps": pl.Int64,
        "parameters": pl.String, "trial cost": pl.Float64, "trials": pl.Int64, "completed": pl.Int64,
        "pruned": pl.Int64, "sweep cost": pl.Float64, "saved by pruning": pl.Float64,
    })


def params_text(params_json: str) -> str:
    return ", ".join(f"{key}={number(value)}" for key, value in json.loads(params_json).items())


# ---------------------------------------------------------------- display (text cells)


def number(value) -> str:
    """Parameters and metrics: 4 significant digits; anything else as it is."""
    if value is None:
        return "-"
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


def metric_text(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def display(frame: pl.DataFrame, metrics: tuple[str, ...] = (), money: tuple[str, ...] = ()) -> pl.DataFrame:
    """Every cell as text, the way the HTML, Markdown and terminal tables show it: the
    columns in `metrics` with 4 decimals, `money` in USD, other numbers with 4 digits."""
    columns = []
    for name, dtype in frame.schema.items():
        if name in money:
            formatter = usd
        elif name in metrics:
            formatter = metric_text
        elif dtype.is_integer() or dtype == pl.String:
            formatter = lambda v: "-" if v is None else str(v)  # noqa: E731
        else:
            formatter = number
        columns.append(pl.Series(name, [formatter(v) for v in frame[name]], dtype=pl.String))
    return pl.DataFrame(columns)
