"""Static PNGs of the report's figures for report.md, drawn by plotly's kaleido in a
headless Chrome or Chromium (Debian: `apt-get install chromium`). Without one, the
report is still written: report.md says so and points to index.html."""

from __future__ import annotations

import os
from pathlib import Path

import kaleido
import plotly.graph_objects as go

__all__ = ["write_pngs"]

WIDTH, HEIGHT = 1000, 460
# Browser tabs drawing at once (kaleido's `n`): two draw a report's plots side by side
# without crowding a small machine.
MOST_TABS = 2


def write_pngs(figures: dict[str, go.Figure], folder: Path, relative_to: Path) -> tuple[dict[str, str], str | None]:
    """Draw every figure to folder/<slug>.png in one browser session, MOST_TABS at once.
    Returns slug -> path relative to `relative_to`, and a note when they could not be drawn."""
    for stale in folder.glob("*.png"):  # from an earlier report into the same folder
        stale.unlink()
    if not figures:
        return {}, None
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{slug}.png" for slug in figures]
    specs = [
        dict(fig=figure.to_dict(), path=path, opts=dict(format="png", width=WIDTH, height=HEIGHT))
        for figure, path in zip(figures.values(), paths)
    ]
    tabs = max(1, min(MOST_TABS, os.cpu_count() or 1, len(specs)))
    try:
        kaleido.write_fig_from_object_sync(specs, kopts={"n": tabs})
    except Exception as exc:  # kaleido: RuntimeError without a browser; others from the browser itself
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return {}, (
            f"Static plots were not drawn ({reason}): kaleido needs Chrome or Chromium "
            "(Debian: apt-get install chromium). Every plot is in index.html."
        )
    return {slug: path.relative_to(relative_to).as_posix() for slug, path in zip(figures, paths)}, None
