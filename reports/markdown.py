"""report.md: what a pull request needs. The leaderboard, the best config, cost and what
pruning saved, the static plots (PNGs beside it, or a pointer to index.html when they
could not be drawn), and the reproducibility record folded away."""

from __future__ import annotations

import polars as pl

from reports.build import Report, SweepReport
from reports.frames import display

__all__ = ["render_markdown"]


def render_markdown(report: Report, images: dict[str, str], images_note: str | None = None) -> str:
    """`images`: figure slug -> path of its PNG relative to report.md (missing: not drawn)."""
    lines = [f"# {report.title}", ""]
    for sweep in report.sweeps:
        lines += [sweep.headline, ""]
        lines += [f"> **Note:** {note}" for note in sweep.notes] + ([""] if sweep.notes else [])
    if images_note:
        lines += [f"> {images_note}", ""]
    if report.comparison:
        comparison = report.comparison
        lines += ["## Comparison", "", "### Best trials side by side", "",
                  _table(display(comparison.best_trials, metrics=("value",),
                                 money=("trial cost", "sweep cost", "saved by pruning"))), ""]
        lines += ["### Config differences", ""]
        lines += [_table(comparison.config_diff) if not comparison.config_diff.is_empty()
                  else "The configs are the same apart from their names.", ""]
        lines += _images(images, [f"comparison-{slug}" for slug in comparison.figures])
    for sweep in report.sweeps:
        lines += _sweep_section(sweep, images, heading="##")
    lines += ["", "_Interactive version of every plot: `index.html` beside this file._", ""]
    return "\n".join(lines)


def _sweep_section(sweep: SweepReport, images: dict[str, str], heading: str) -> list[str]:
    data, metric = sweep.data, sweep.data.record.metric
    sub = heading + "#"
    board = display(sweep.leaderboard.drop("state"), metrics=(metric, f"best {metric} seen"), money=("cost",))
    lines = [f"{heading} Sweep {sweep.name}", "", f"{sub} Leaderboard", "", _table(board), ""]
    lines += [f"{sub} Best config", ""]
    if data.best_config_yaml:
        lines += ["Train it as one run: `sweep start best_config.yaml` with this file.", "",
                  "```yaml", data.best_config_yaml.rstrip(), "```", ""]
    else:
        lines += [sweep.best_config_missing, ""]
    confirmed = sweep.confirmation_table()
    if confirmed is not None:
        table, notes = confirmed
        lines += [f"{sub} Confirmation", "", "The best configs of the search trained again to max_steps over new seeds "
                  "(search.confirm); the winner is the best mean.", "", _table(table), "", *(f"{n}  " for n in notes), ""]
    front = sweep.front_table()
    if front is not None:
        lines += [f"{sub} Pareto front", "", f"The completed trials no other beats in every objective "
                  f"({data.front and len(data.front.front)} of {data.front and len(data.front.points)}); "
                  "register one with `sweep promote NAME --trial N`.", "", _table(front), ""]
    lines += [f"{sub} Cost", "", _table(sweep.cost_table(), header=("item", "value")), ""]
    lines += [f"{sub} Plots", ""]
    lines += _images(images, [f"{sweep.name}-{slug}" for slug in sweep.figures])
    lines += [f"Parameter importance: {sweep.importance.note}", ""]
    lines += ["<details><summary>Reproducibility record (versions, data hashes, seeds)</summary>", "",
              _table(sweep.reproducibility_table(), header=("item", "value")), "", "</details>", ""]
    return lines


def _images(images: dict[str, str], slugs: list[str]) -> list[str]:
    lines = []
    for slug in slugs:
        if slug in images:
            lines += [f"![{slug}]({images[slug]})", ""]
    return lines


def _table(frame: pl.DataFrame, header: tuple[str, ...] | None = None) -> str:
    """A GitHub Markdown table of text cells (pipes escaped)."""
    names = list(header or frame.columns)
    rows = [names, ["---"] * len(names)]
    rows += [["-" if value is None else str(value) for value in row] for row in frame.iter_rows()]
    return "\n".join("| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in row) + " |" for row in rows)
