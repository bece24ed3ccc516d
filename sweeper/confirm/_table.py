"""The confirmation of a sweep read from where it is recorded, and shown: from the driver's
book (the end-of-sweep summary, best_config.yaml) or from the store's trial frame (`sweep
status`, the report, while it runs and after), as text cells, a terminal table and a
polars frame. No Ray."""

from __future__ import annotations

import json
import math

import polars as pl
from rich.table import Table

from sweeper.confirm._select import SEED_PATH, Candidate, Confirmation, Rerun, confirm, new_seeds
from sweeper.names import TrialState

__all__ = ["from_book", "from_trials", "reruns_to_run", "confirmation_cells", "confirmation_frame", "confirmation_table",
           "confirmation_lines"]


def _seed(params: dict) -> int:
    return int(float(params[SEED_PATH]))


def from_book(book, spec) -> Confirmation:
    """The confirmation as the book holds it: the search's completed and pruned trials, the
    reruns (records that confirm one), the seeds and top count of `spec.search.confirm`."""
    records = sorted(book.trials.values(), key=lambda t: t.number)
    candidates = [Candidate(t.number, t.params, t.last(book.metric), t.step) for t in records
                  if t.confirms is None and t.state in (TrialState.COMPLETED, TrialState.PRUNED)]
    reruns = [Rerun(t.confirms, _seed(t.params), t.last(book.metric) if t.state == TrialState.COMPLETED else None,
                    t.number, t.trial_id) for t in records if t.confirms is not None]
    settings = spec.search.confirm
    return confirm(candidates, reruns, book.metric, book.goal, settings.top, new_seeds(spec.training.seed, settings.seeds))


def from_trials(trials: pl.DataFrame, metric: str, goal: str) -> Confirmation | None:
    """The confirmation in a store's `trials()` frame (None when no trial confirms one):
    the configs rerun so far, the seeds seen so far."""
    if "confirms" not in trials.columns or trials["confirms"].is_null().all():
        return None
    rows = trials.sort("trial_number").to_dicts()
    reruns = [Rerun(r["confirms"], _seed(json.loads(r["params"])),
                    r["metric"] if r["state"] == TrialState.COMPLETED else None, r["trial_number"], r["trial_id"])
              for r in rows if r["confirms"] is not None]
    confirmed = {rerun.confirms for rerun in reruns}
    candidates = [Candidate(r["trial_number"], json.loads(r["params"]), r["metric"], r["steps"] or 0) for r in rows
                  if r["confirms"] is None and r["trial_number"] in confirmed]
    seeds = sorted({rerun.seed for rerun in reruns})
    return confirm(candidates, reruns, metric, goal, len(confirmed), seeds)


def _typed(value):
    """A value as the search sampled it: a resumed sweep's book holds MLflow's text."""
    if not isinstance(value, str):
        return value
    import yaml

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return parsed if isinstance(parsed, (int, float, bool)) else value


def reruns_to_run(confirmation: Confirmation, book) -> list[tuple[int, dict]]:
    """(search trial number, config) of every rerun the book has not finished: each
    confirmed config's values with each seed."""
    done = {(t.confirms, int(float(t.params[SEED_PATH]))) for t in book.trials.values()
            if t.confirms is not None and t.finished}
    points = []
    for row in confirmation.rows:
        values = {path: _typed(value) for path, value in row.candidate.params.items() if path != SEED_PATH}
        points += [(row.candidate.number, {**values, SEED_PATH: seed}) for seed in confirmation.seeds
                   if (row.candidate.number, seed) not in done]
    return points


def _num(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4f}"


def _value(value) -> str:
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


def confirmation_cells(confirmation: Confirmation) -> tuple[list[str], list[list[str]]]:
    """(column names, rows of text): each confirmed config's search trial, its values,
    its search value, its value at each seed, the mean, the 95% interval, and which won."""
    params = sorted({p for row in confirmation.rows for p in row.candidate.params if p != SEED_PATH})
    metric = confirmation.metric
    columns = ["trial", *params, f"search {metric}", "at step", *(f"seed {s}" for s in confirmation.seeds),
               "mean", "95% interval", "winner"]
    cells = []
    for row in confirmation.rows:
        interval = "-" if row.low is None else f"[{row.low:.4f}, {row.high:.4f}]"
        cells.append([
            str(row.candidate.number), *(_value(row.candidate.params.get(p, "-")) for p in params),
            _num(row.candidate.value), str(row.candidate.step), *(_num(row.values.get(s)) for s in confirmation.seeds), _num(row.mean),
            interval, "by mean" if row is confirmation.winner else "",
        ])
    return columns, cells


def confirmation_lines(confirmation: Confirmation) -> list[str]:
    """What the table's rows do not say: the winner and the trial promoted for it, whether
    the mean changed the search's pick, reruns without a value, and the notes."""
    lines = list(confirmation.notes)
    winner, promoted = confirmation.winner, confirmation.promoted
    if winner is not None:
        lines.append(
            f"Winner by mean: trial {winner.candidate.number}'s config ({confirmation.metric} {winner.mean:.4f} over "
            f"{len(winner.values)} seeds); promoted by default: trial {promoted.number} (its rerun with seed "
            f"{promoted.seed}, the best of its seeds)"
            + ("" if not confirmation.changed_winner else
               f"; the search's single best, trial {confirmation.rows[0].candidate.number}, lost on the mean")
        )
    elif confirmation.rows:
        lines.append("No winner by mean: no config has a value at every seed; the best trial is the search's")
    if confirmation.missing:
        lines.append("Reruns without a value (failed, stopped or not run): " + ", ".join(
            f"trial {m.confirms} seed {m.seed}" for m in confirmation.missing))
    return lines


def confirmation_table(confirmation: Confirmation) -> Table:
    """The terminal table (`sweep status`, the end-of-sweep summary)."""
    columns, cells = confirmation_cells(confirmation)
    table = Table(
        title=f"Confirmation: the best {len(confirmation.rows)} config(s) again over {len(confirmation.seeds)} new "
              f"seeds each to max_steps ({confirmation.metric}, {confirmation.goal}; winner by mean)",
        title_justify="left",
    )
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if column == "winner" else "right", no_wrap=index == 0)
    for row in cells:
        table.add_row(*row)
    return table


def confirmation_frame(confirmation: Confirmation) -> pl.DataFrame:
    """The table as a frame of text (the report)."""
    columns, cells = confirmation_cells(confirmation)
    return pl.DataFrame(cells, schema={name: pl.String for name in columns}, orient="row")
