"""The terminal: a live rich table while the sweep runs, a summary when it ends."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sweeper.track._book import SweepBook, TrialRecord
from sweeper.names import TrialState
from sweeper.views import STATE_STYLE

# Where the output is a file or a pipe, the live ETA line at most this often.
ETA_PRINT_SECONDS = 30.0


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def trial_table(book: SweepBook, param_names: list[str]) -> Table:
    best = book.best(states=(TrialState.COMPLETED, TrialState.PRUNED, TrialState.RUNNING, TrialState.PAUSED))
    best_text = f"{best.last(book.metric):.4f} (trial {best.number})" if best else "-"
    table = Table(title=f"{book.metric}: best so far {best_text}", title_justify="left")
    table.add_column("trial", justify="right")
    table.add_column("status")
    for name in param_names:
        table.add_column(name, justify="right")
    table.add_column("step", justify="right")
    table.add_column(book.metric, justify="right")
    # Says why a poor trial goes on past a rung: early_stopping.startup_trials (as `sweep status`).
    with_startup = any(record.startup_trial for record in book.trials.values())
    if with_startup:
        table.add_column("startup trial")
    for record in sorted(book.trials.values(), key=lambda r: r.number):
        style = STATE_STYLE.get(record.state, "")
        marker = " *" if best is record else ""
        table.add_row(
            f"{record.number}{marker}",
            # Text, not markup: a status may have no style, and failure reasons quote
            # user strings that can hold brackets.
            Text(record.status_text, style=style),
            *(_fmt(record.params.get(name)) for name in param_names),
            str(record.step),
            _fmt(record.last(book.metric)),
            *(["yes" if record.startup_trial else "-"] if with_startup else []),
        )
    return table


class LiveTable:
    """Redraws the trial table on a terminal; prints a line per finished trial when the
    output is a file or a pipe (CI logs). A listener of the driver callback
    (sweeper/run/_driver.py)."""

    def __init__(self, book: SweepBook, param_names: list[str], console: Console):
        self.book, self.param_names, self.console = book, param_names, console
        self.live: Live | None = None
        self.waiting_on: list[str] | None = None  # the driver's watchdog's finding, under the table
        self.eta: str | None = None  # the live forecast's line (sweeper/budget/_live_forecast.py), under the table
        self._eta_printed_at = 0.0

    def __enter__(self) -> "LiveTable":
        if self.console.is_terminal:
            self.live = Live(self._render(), console=self.console, refresh_per_second=2, get_renderable=self._render)
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.live.stop()
        else:
            self.console.print(self._render())

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state (for restore); the
        # terminal handles are runtime-only.
        return {**self.__dict__, "console": None, "live": None}

    def _render(self) -> Table:
        table = trial_table(self.book, self.param_names)
        caption = Text()
        if self.eta:
            caption.append(self.eta)
        if self.waiting_on:
            caption.append(("\n" if self.eta else "") + "\n".join(self.waiting_on), style="yellow")
        if caption:
            table.caption = caption
            table.caption_justify = "left"
        return table

    def forecast(self, line: str) -> None:
        """The live estimate (`ETA 3 min 10 s, $0.41 to go of $1.20 expected (...)`), under
        the table; where the output is no terminal, printed at most every
        `ETA_PRINT_SECONDS` and with each finished trial."""
        self.eta = line
        if not self.live and time.time() - self._eta_printed_at >= ETA_PRINT_SECONDS:
            self._print_eta()

    def _print_eta(self) -> None:
        if self.eta:
            self.console.print(self.eta, markup=False, highlight=False, soft_wrap=True)
            self._eta_printed_at = time.time()

    def waiting(self, lines: list[str] | None) -> None:
        """What the sweep waits on (sweeper/run/_watchdog.py), shown under the table; None
        once a trial reports again. Printed as lines where the output is no terminal."""
        self.waiting_on = lines
        if lines and not self.live:
            for line in lines:
                self.console.print(line, markup=False, highlight=False)

    def trial_finished(self, record: TrialRecord) -> None:
        if not self.live:
            self.console.print(_one_line(record, self.book.metric, self.param_names), markup=False)
            self._print_eta()


def _one_line(record: TrialRecord, metric: str, param_names: list[str]) -> str:
    params = ", ".join(f"{name}={_fmt(record.params.get(name))}" for name in param_names)
    startup = " (startup trial)" if record.startup_trial else ""
    return f"trial {record.number}: {record.status_text}{startup}; {metric}={_fmt(record.last(metric))}; {params}"
