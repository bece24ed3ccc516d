"""Static PNGs of the report's figures for report.md, drawn by plotly's kaleido in a
headless Chrome or Chromium (Debian: `apt-get install chromium`). Without one, the
report is still written: report.md says so and points to index.html."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

__all__ = ["write_pngs"]

WIDTH, HEIGHT = 1000, 460


def write_pngs(figures: dict[str, go.Figure], folder: Path, relative_to: Path) -> tuple[dict[str, str], str | None]:
    """Draw every figure to folder/<slug>.png in one browser session. Returns slug -> path
    relative to `relative_to`, and a note when they could not be drawn."""
    for stale in folder.glob("*.png"):  # from an earlier report into the same folder
        stale.unlink()
    if not figures:
        return {}, None
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{slug}.png" for slug in figures]
    try:
        pio.write_images(list(figures.values()), paths, width=WIDTH, height=HEIGHT)
    except Exception as exc:  # kaleido: RuntimeError without a browser; others from the browser itself
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return {}, (
            f"Static plots were not drawn ({reason}): kaleido needs Chrome or Chromium "
            "(Debian: apt-get install chromium). Every plot is in index.html."
        )
    return {slug: path.relative_to(relative_to).as_posix() for slug, path in zip(figures, paths)}, None
