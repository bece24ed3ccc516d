"""Comparison reports (`sweep report`): frames from MLflow through the store, figures with
plotly, a self-contained index.html, report.md for a pull request and a terminal table.

data.py reads the store; frames.py and importance.py compute; figures.py draws; build.py
assembles; html.py, markdown.py, static.py and terminal.py render."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from sweeper.errors import UserError

if TYPE_CHECKING:
    from reports.build import Report
    from sweeper.track import SweepStore

__all__ = ["make_report", "WrittenReport", "check_writable"]


@dataclass(frozen=True)
class WrittenReport:
    folder: Path
    html: Path
    markdown: Path
    images: dict[str, str]
    images_note: str | None
    report: Report


def check_writable(folder: Path) -> None:
    """Refuse, before anything is read, a `folder` that cannot be created and written:
    a clear UserError. Tried with a probe that leaves nothing behind; the folder itself
    is made once the report is built."""
    from sweeper.folders import folder_creation_problem

    problem = folder_creation_problem(folder)
    if problem:
        raise UserError(f"--out: {problem}; give a folder you can write to")


def make_report(store: SweepStore, names: list[str], out: Path, console: Console | None = None) -> WrittenReport:
    """Read the named sweeps from `store`, write index.html, report.md and
    plots/*.png into `out`, and print the summary table to `console`."""
    from reports.build import build_report
    from reports.data import load_sweeps
    from reports.html import render_html
    from reports.markdown import render_markdown
    from reports.static import write_pngs
    from reports.terminal import print_summary

    check_writable(out)
    report = build_report(load_sweeps(store, names))
    out.mkdir(parents=True, exist_ok=True)
    html = out / "index.html"
    html.write_text(render_html(report), encoding="utf-8")
    images, note = write_pngs(report.all_figures(), out / "plots", relative_to=out)
    markdown = out / "report.md"
    markdown.write_text(render_markdown(report, images, note), encoding="utf-8")
    if console is not None:
        print_summary(report, console)
    return WrittenReport(out, html, markdown, images, note, report)
