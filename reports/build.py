"""A report's content, built once from the sweeps' frames: tables, figures and notes per
sweep, plus the comparison when there are several. html.py, markdown.py and terminal.py
only render this."""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go
import polars as pl

import reports.figures as figures
from reports.data import SweepData
from reports.frames import (
    best_trial_number, best_trials, config_diff, cost_summary, leaderboard, metric_text, number, params_text, usd,
)
from reports.importance import Importance, param_importance
from sweeper.names import TrialState

__all__ = ["SweepReport", "Comparison", "Report", "build_report"]


@dataclass(frozen=True)
class SweepReport:
    data: SweepData
    leaderboard: pl.DataFrame
    costs: dict[str, float | None]
    importance: Importance
    figures: dict[str, go.Figure]  # slug -> figure, in reading order
    notes: list[str] = field(default_factory=list)  # what is missing and why

    @property
    def name(self) -> str:
        return self.data.name

    @property
    def has_completed_trial(self) -> bool:
        return self.data.count(TrialState.COMPLETED) > 0

    @property
    def best_config_missing(self) -> str:
        """Why there is no best config to show."""
        if not self.has_completed_trial:
            return "No best config: no trial completed."
        if self.data.record.best_trial_id is None:
            return "No best config yet: the sweep has not finished."
        return "best_config.yaml could not be read from the sweep's MLflow artifacts."

    @property
    def headline(self) -> str:
        data, record = self.data, self.data.record
        counts = ", ".join(f"{data.count(state)} {state}" for state in (TrialState.COMPLETED, TrialState.PRUNED, TrialState.FAILED))
        text = (f"Sweep {self.name!r} ({record.status}): {data.trials.height} trials, {counts}; "
                f"metric {record.metric} ({record.goal}).")
        best = best_trial_number(data)
        if best is not None:
            row = data.trials.filter(pl.col("trial_number") == best).row(0, named=True)
            text += f" Best: trial {best}, {record.metric} = {metric_text(row['metric'])} ({params_text(row['params'])})."
        confirmation = self.confirmation
        if confirmation is not None and confirmation.winner is not None:
            text += (f" Confirmed by the mean over {len(confirmation.seeds)} seeds: trial "
                     f"{confirmation.winner.candidate.number}'s config ({metric_text(confirmation.winner.mean)}).")
        return text

    @property
    def confirmation(self):
        """search.confirm: the sweep's confirmation (sweeper.confirm.Confirmation), or None."""
        from sweeper.confirm import from_trials

        return from_trials(self.data.trials, self.data.record.metric, self.data.record.goal)

    def confirmation_table(self) -> tuple[pl.DataFrame, list[str]] | None:
        """search.confirm: each confirmed config's seeds, mean, 95% interval and the winner
        (text), and the lines under it; None for a sweep without confirmation."""
        from sweeper.confirm import confirmation_frame, confirmation_lines

        confirmation = self.confirmation
        return None if confirmation is None else (confirmation_frame(confirmation), confirmation_lines(confirmation))

    def cost_table(self) -> pl.DataFrame:
        """The cost totals and what pruning saved, as (item, value) text rows."""
        costs = self.costs
        rows = [
            ("total cost", usd(costs["cost_usd"])),
            ("saved by pruning", f"{usd(costs['saved_by_pruning_usd'])} ({costs['saved_share']:.0%} of the cost without pruning)"),
            ("cost without pruning (estimate)", usd(costs["without_pruning_usd"])),
            ("accelerator-hours", number(costs["accelerator_hours"])),
            ("tokens trained", "-" if costs["tokens"] is None else f"{costs['tokens']:,.0f}"),
            ("USD per million tokens", usd(costs["usd_per_million_tokens"])),
            ("wall time (s)", number(costs["wall_seconds"])),
            ("price", f"{self.data.record.reproducibility['USD per accelerator-hour']} USD per accelerator-hour "
                      f"({self.data.record.reproducibility['accelerator']})"),
        ]
        rows += forecast_rows(self.data.record.totals)  # forecast against actual, budget cut
        return pl.DataFrame(rows, schema={"item": pl.String, "value": pl.String}, orient="row")

    def front_table(self) -> pl.DataFrame | None:
        """search.objectives: one row per trial on the Pareto front, its value of each
        objective (text); None for a sweep of one objective."""
        front = self.data.front
        if front is None:
            return None
        numbers = dict(zip(self.data.trials["trial_id"], self.data.trials["trial_number"]))
        values = dict(front.points)
        rows = [[str(numbers.get(t, t)), *(number(v) for v in values[t])] for t in front.front]
        schema = {"trial": pl.String, **{f"{m} ({g})": pl.String for m, g in zip(front.metrics, front.goals)}}
        return pl.DataFrame(rows, schema=schema, orient="row")

    def reproducibility_table(self) -> pl.DataFrame:
        """Versions, data hashes, seeds and the rest of the record, as (item, value) text rows."""
        record = self.data.record
        rows = [
            *((f"seed: {key}", value) for key, value in record.seeds.items()),
            *((f"data sha256: {split}", sha) for split, sha in record.data_sha256.items()),
            *((f"version: {package}", version) for package, version in record.versions.items()),
            *record.reproducibility.items(),
        ]
        return pl.DataFrame(rows, schema={"item": pl.String, "value": pl.String}, orient="row")


@dataclass(frozen=True)
class Comparison:
    best_trials: pl.DataFrame
    config_diff: pl.DataFrame
    figures: dict[str, go.Figure]


@dataclass(frozen=True)
class Report:
    sweeps: list[SweepReport]
    comparison: Comparison | None  # only for several sweeps

    @property
    def title(self) -> str:
        names = [sweep.name for sweep in self.sweeps]
        return f"Sweep report: {names[0]}" if len(names) == 1 else f"Sweep comparison: {' vs '.join(names)}"

    def all_figures(self) -> dict[str, go.Figure]:
        """Every figure by a file-name-safe slug, comparison first."""
        found = {f"comparison-{slug}": fig for slug, fig in (self.comparison.figures if self.comparison else {}).items()}
        for sweep in self.sweeps:
            found.update({f"{sweep.name}-{slug}": fig for slug, fig in sweep.figures.items()})
        return found


def build_report(sweeps: list[SweepData]) -> Report:
    comparison = None
    if len(sweeps) > 1:
        comparison = Comparison(
            best_trials=best_trials(sweeps),
            config_diff=config_diff(sweeps),
            figures=_present({"progress": figures.progress_figure(sweeps), "best-curves": figures.best_curves_figure(sweeps)}),
        )
    return Report(sweeps=[_sweep_report(data) for data in sweeps], comparison=comparison)


def _sweep_report(data: SweepData) -> SweepReport:
    importance = param_importance(data.trials, data.record.search_space, data.record.goal)
    notes = []
    if data.trials.is_empty():
        notes.append(f"Sweep {data.name!r} has no trials in MLflow yet.")
    elif data.count(TrialState.COMPLETED) == 0:
        states = ", ".join(f"{n} {state}" for state, n in data.trials["state"].value_counts(sort=True).iter_rows())
        notes.append(
            f"Sweep {data.name!r} has no completed trial ({states}): there is no best trial, best config or "
            "parameter importance; the tables and curves show what exists."
        )
    candidates = {
        "curves": figures.curves_figure(data),
        "parallel": figures.parallel_figure(data),
        "importance": figures.importance_figure(data, importance.frame),
        "progress": figures.progress_figure([data]),
        "cost": figures.cost_figure(data),
        "forecast": figures.forecast_figure(data),
        "pareto-front": figures.front_figure(data),
    }
    return SweepReport(
        data=data,
        leaderboard=leaderboard(data),
        costs=cost_summary(data),
        importance=importance,
        figures=_present(candidates),
        notes=notes,
    )


def _present(candidates: dict[str, go.Figure | None]) -> dict[str, go.Figure]:
    return {slug: fig for slug, fig in candidates.items() if fig is not None}


def forecast_rows(totals: dict) -> list[tuple[str, str]]:
    """The forecast `sweep start` logged (sweeper/plan/_command.py) beside the actual, and what
    a budget cap cut; none for a sweep without them."""
    rows = []
    if "forecast_expected_usd" in totals:
        rows.append(("forecast cost (expected / without early stopping)",
                     f"{usd(totals['forecast_expected_usd'])} / {usd(totals.get('forecast_worst_usd'))}"))
        rows.append(("forecast wall time (s, expected / without early stopping)",
                     f"{number(totals['forecast_expected_wall_seconds'])} / {number(totals.get('forecast_worst_wall_seconds'))}"))
    stopped, not_started = totals.get("budget_trials_stopped", 0), totals.get("budget_trials_not_started", 0)
    if stopped or not_started:
        rows.append(("cut by the budget", f"{stopped:.0f} running trials stopped, {not_started:.0f} not started"))
    return rows
