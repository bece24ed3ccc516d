"""index.html: one self-contained page. plotly.js is embedded once in the head (no CDN), so
the page opens offline; every figure is a div drawn by it."""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

import plotly.graph_objects as go
import polars as pl
from plotly.offline import get_plotlyjs

from reports.build import Report, SweepReport
from reports.frames import display

__all__ = ["render_html"]

STYLE = """
body { font-family: -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif; margin: 0; color: #222; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 28px 60px; }
h1 { font-size: 1.6em; margin-bottom: 4px; } h2 { margin-top: 40px; border-bottom: 1px solid #ddd; }
h3 { margin-top: 28px; }
.meta { color: #666; font-size: 0.9em; }
.note { background: #fff5d6; border-left: 4px solid #e0a800; padding: 8px 12px; margin: 12px 0; }
table { border-collapse: collapse; margin: 10px 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 4px 9px; text-align: right; }
th { background: #f4f4f4; } td.text, th.text, td.state { text-align: left; }
tr.completed td.state { color: #1a7f37; } tr.pruned td.state { color: #8a6d00; } tr.failed td.state { color: #c62828; }
tr.best { font-weight: bold; background: #eef7ee; }
pre { background: #f6f8fa; padding: 10px; overflow-x: auto; font-size: 0.85em; }
.figure { margin: 14px 0 26px; }
"""


def render_html(report: Report) -> str:
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"<h1>{escape(report.title)}</h1>", f"<p class='meta'>Generated {generated} by <code>sweep report</code>.</p>"]
    for sweep in report.sweeps:
        body += [f"<p>{escape(sweep.headline)}</p>", *(_note(text) for text in sweep.notes)]
    if report.comparison:
        comparison = report.comparison
        body += ["<h2>Comparison</h2>", "<h3>Best trials side by side</h3>",
                 _table(display(comparison.best_trials, metrics=("value",), money=("trial cost", "sweep cost", "saved by pruning")))]
        body.append("<h3>Config differences</h3>")
        body.append(_table(comparison.config_diff) if not comparison.config_diff.is_empty()
                    else "<p>The configs are the same apart from their names.</p>")
        body += [_figure(f"comparison-{slug}", fig) for slug, fig in comparison.figures.items()]
    for sweep in report.sweeps:
        body += _sweep_section(sweep, heading="h2")
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{escape(report.title)}</title>\n<style>{STYLE}</style>\n"
        f"<script type='text/javascript'>{get_plotlyjs()}</script>\n</head>\n"
        f"<body><main>\n{chr(10).join(body)}\n</main></body>\n</html>\n"
    )


def _sweep_section(sweep: SweepReport, heading: str) -> list[str]:
    data, record = sweep.data, sweep.data.record
    metric = record.metric
    board = sweep.leaderboard
    classes = [f"{state}{' best' if rank == 1 and state == 'completed' else ''}"
               for rank, state in zip(board["rank"], board["state"])]
    parts = [
        f"<{heading} id='sweep-{escape(sweep.name)}'>Sweep {escape(sweep.name)}</{heading}>",
        *(_note(text) for text in sweep.notes),
        "<h3>Leaderboard</h3>",
        _table(display(board.drop("state"), metrics=(metric, f"best {metric} seen"), money=("cost",)),
               row_classes=classes, state_column="status"),
    ]
    figures = dict(sweep.figures)
    parts += [_figure(f"{sweep.name}-{slug}", figures.pop(slug)) for slug in ("curves", "parallel") if slug in figures]
    parts.append("<h3>Parameter importance</h3>")
    parts.append(f"<p>{escape(sweep.importance.note)}</p>")
    if "importance" in figures:
        parts.append(_figure(f"{sweep.name}-importance", figures.pop("importance")))
    parts += ["<h3>Cost</h3>", _table(sweep.cost_table(), header=False, align_numbers=False)]
    parts += [_figure(f"{sweep.name}-{slug}", fig) for slug, fig in figures.items()]
    confirmed = sweep.confirmation_table()
    if confirmed is not None:  # search.confirm
        parts += ["<h3>Confirmation</h3>", _table(confirmed[0], align_numbers=False), *(_note(n) for n in confirmed[1])]
    parts.append("<h3>Best config</h3>")
    parts.append(f"<pre>{escape(data.best_config_yaml)}</pre>" if data.best_config_yaml
                 else f"<p>{escape(sweep.best_config_missing)}</p>")
    parts += ["<h3>Reproducibility</h3>", _table(sweep.reproducibility_table(), header=False, align_numbers=False)]
    return parts


def _figure(div_id: str, fig: go.Figure) -> str:
    inner = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})
    return f"<div class='figure' data-figure='{escape(div_id)}'>{inner}</div>"


def _note(text: str) -> str:
    return f"<div class='note'>{escape(text)}</div>"


def _table(frame: pl.DataFrame, row_classes: list[str] | None = None, header: bool = True,
           state_column: str | None = None, align_numbers: bool = True) -> str:
    text_columns = {name for name, dtype in frame.schema.items() if dtype == pl.String}
    rows = []
    if header:
        rows.append("<tr>" + "".join(f"<th class='text'>{escape(c)}</th>" for c in frame.columns) + "</tr>")
    for index, row in enumerate(frame.iter_rows()):
        cells = []
        for column, value in zip(frame.columns, row):
            is_text = column in text_columns and not (align_numbers and _numeric(value))
            kind = "state" if column == state_column else ("text" if is_text else "")
            cells.append(f"<td class='{kind}'>{escape('-' if value is None else str(value))}</td>")
        css = f" class='{row_classes[index]}'" if row_classes else ""
        rows.append(f"<tr{css}>{''.join(cells)}</tr>")
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _numeric(value) -> bool:
    text = str(value).lstrip("$").replace(",", "")
    try:
        float(text)
    except ValueError:
        return False
    return True
