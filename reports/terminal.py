"""The terminal summary: the leaderboard of each sweep as a rich table (and the best
trials side by side when there are several), from the same frames as the files."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from reports.build import Report, SweepReport
from reports.frames import display
from sweeper.views import STATE_STYLE

__all__ = ["print_summary", "TERMINAL_ROWS"]

# The leaderboard's first rows on the terminal; index.html and report.md have every trial
# (a 905-trial leaderboard took rich 2 s to draw).
TERMINAL_ROWS = 20


def print_summary(report: Report, console: Console) -> None:
    if report.comparison:
        best = display(report.comparison.best_trials, metrics=("value",),
                       money=("trial cost", "sweep cost", "saved by pruning"))
        console.print(_table("Best trials side by side", best.columns, best.iter_rows()))
    for sweep in report.sweeps:
        console.print(_leaderboard(sweep))
        if sweep.leaderboard.height > TERMINAL_ROWS:
            console.print(
                f"The {TERMINAL_ROWS} best of {sweep.leaderboard.height} trials; index.html and report.md rank them all.",
                highlight=False,
            )
        for note in sweep.notes:
            console.print(f"[yellow]note:[/yellow] {note}", highlight=False)


def _leaderboard(sweep: SweepReport) -> Table:
    metric = sweep.data.record.metric
    board = sweep.leaderboard.head(TERMINAL_ROWS)
    shown = display(board.drop("state", f"best {metric} seen"), metrics=(metric,), money=("cost",))
    costs = sweep.cost_table()
    total, saved = costs["value"][0], costs["value"][1]
    title = f"{sweep.headline}\nCost {total}; pruning saved {saved}."
    rows = []
    for state, row in zip(board["state"], shown.iter_rows()):
        style = STATE_STYLE.get(state, "")
        status_index = shown.columns.index("status")
        row = list(row)
        if style:
            row[status_index] = f"[{style}]{row[status_index]}[/{style}]"
        rows.append(row)
    return _table(title, shown.columns, rows)


def _table(title: str, columns: list[str], rows) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="left" if column in ("status", "sweep", "parameters", "metric") else "right")
    for row in rows:
        table.add_row(*row)
    return table
