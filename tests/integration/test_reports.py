"""`sweep report` on real sweeps and a real MLflow store: the HTML opened in headless
Chromium, the Markdown checked against MLflow, two sweeps compared, and bad input."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from PIL import Image, ImageStat

from sweeper.views import usd
from tests.conftest import markdown_table, small_sweep, write_yaml
from tests.integration.conftest import run_cli

pytestmark = pytest.mark.integration

BROWSER_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
]
# Put first in <head> of a copy of the page: records console.error calls and uncaught
# errors on the <html> element, where --dump-dom shows them.
CONSOLE_PROBE = """<script>
(function () {
  var seen = [];
  var keep = function (text) { seen.push(String(text)); document.documentElement.setAttribute('data-console-errors', JSON.stringify(seen)); };
  document.documentElement.setAttribute('data-console-errors', '[]');
  var error = console.error;
  console.error = function () { keep(Array.prototype.join.call(arguments, ' ')); error.apply(console, arguments); };
  window.addEventListener('error', function (e) { keep('uncaught: ' + e.message); });
  window.addEventListener('unhandledrejection', function (e) { keep('unhandled rejection: ' + e.reason); });
})();
</script>"""


def open_in_chromium(chromium: str, page: Path, workdir: Path) -> dict:
    """Load the page headless: its DOM after plotly drew, the console errors, a screenshot."""
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("<head>", "<head>\n" + CONSOLE_PROBE, 1))
    common = [chromium, *BROWSER_FLAGS, "--virtual-time-budget=30000", "--enable-logging=stderr"]
    dump = subprocess.run([*common, f"--user-data-dir={workdir / 'profile-dom'}", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=240)
    probe.unlink()
    shot = workdir / "screenshot.png"
    subprocess.run([*common, f"--user-data-dir={workdir / 'profile-shot'}", "--window-size=1280,2400",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=240)
    errors = re.search(r'data-console-errors="([^"]*)"', dump.stdout)
    return {
        "dom": dump.stdout,
        "console_errors": json.loads(html.unescape(errors.group(1))) if errors else None,
        "uncaught": [line for line in dump.stderr.splitlines() if "Uncaught" in line],
        "screenshot": shot,
    }


def rendered_figures(dom: str) -> dict[str, str]:
    """figure id -> the part of the DOM that holds it."""
    parts = re.split(r"<div class=\"figure\" data-figure=\"", dom)[1:]
    return {part.split('"', 1)[0]: part for part in parts}


def assert_renders(chromium: str, page: Path, workdir: Path, expected: set[str]) -> dict:
    figure_ids = set(re.findall(r"data-figure='([^']+)'", page.read_text()))
    assert figure_ids == expected
    seen = open_in_chromium(chromium, page, workdir)
    assert seen["console_errors"] == [], seen["console_errors"]  # [] also proves the probe ran
    assert seen["uncaught"] == []
    drawn = rendered_figures(seen["dom"])
    assert set(drawn) == expected
    for figure_id, part in drawn.items():
        assert 'class="plot-container plotly"' in part and 'class="main-svg"' in part, figure_id
        assert re.search(r'class="(scatterlayer|barlayer|parcoords)', part), figure_id  # its data was drawn
    image = Image.open(seen["screenshot"]).convert("L")
    assert image.size == (1280, 2400)
    assert ImageStat.Stat(image).stddev[0] > 15  # not a blank page ...
    not_white = sum(count for value, count in enumerate(image.histogram()) if value < 200)
    assert not_white > 0.01 * image.size[0] * image.size[1]  # ... but text, tables, lines and bars
    return seen


def runs_of(client: MlflowClient, sweep_name: str):
    experiment = client.get_experiment_by_name("sweeper")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`sweeper.sweep_name` = '{sweep_name}'")
    (parent,) = [r for r in runs if r.data.tags["sweeper.kind"] == "sweep"]
    return parent, [r for r in runs if r.data.tags["sweeper.kind"] == "trial"]


def test_report_opens_in_headless_chromium(finished_sweep, chromium, tmp_path):
    out = tmp_path / "report"
    result = run_cli("report", "shared", "--out", str(out), cwd=finished_sweep.workdir, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank" in result.stdout and "pruning saved" in result.stdout and f"Report: {out}/index.html" in result.stdout
    html_text = (out / "index.html").read_text()
    assert "1 parameter searched: importance needs at least 2 to compare." in html_text
    expected = {f"shared-{slug}" for slug in ("curves", "parallel", "progress", "cost", "forecast")}
    seen = assert_renders(chromium, out / "index.html", tmp_path, expected)
    # The curves mark the ASHA rung (step 10 of 30) and draw pruned trials dashed.
    curves = rendered_figures(seen["dom"])["shared-curves"]
    assert "ASHA rung 10" in curves and "stroke-dasharray" in curves
    # Static copies of the same plots for report.md, drawn by kaleido in the same Chromium.
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(f"{slug}.png" for slug in expected)


@pytest.mark.story
def test_markdown_agrees_with_mlflow(finished_sweep, chromium, tmp_path):
    out = tmp_path / "md"
    result = run_cli("report", "shared", "--out", str(out), cwd=finished_sweep.workdir, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    text = (out / "report.md").read_text()
    client = MlflowClient(finished_sweep.tracking_uri)
    parent, children = runs_of(client, "shared")

    board = markdown_table(text, "### Leaderboard")
    assert len(board) == 5
    by_trial = {int(row["trial"]): row for row in board}
    for child in children:
        row = by_trial[int(child.data.tags["sweeper.trial_number"])]
        metrics = child.data.metrics
        assert row["status"] == child.data.tags["sweeper.status"]
        assert row["steps"] == str(int(metrics["steps_trained"]))
        assert row["eval_loss"] == f"{metrics['eval_loss']:.4f}"
        assert row["cost"] == usd(metrics["cost_usd"])
        assert row["training.learning_rate"] == f"{float(child.data.params['training.learning_rate']):.4g}"
    best = next(c for c in children if c.info.run_id == parent.data.tags["sweeper.best_run_id"])
    assert board[0]["rank"] == "1" and board[0]["trial"] == best.data.tags["sweeper.trial_number"]
    assert board[0]["eval_loss"] == f"{parent.data.metrics['best_eval_loss']:.4f}"
    completed = [row for row in board if row["status"] == "completed"]
    assert [float(r["eval_loss"]) for r in completed] == sorted(float(r["eval_loss"]) for r in completed)

    best_config = Path(client.download_artifacts(parent.info.run_id, "best_config.yaml", str(tmp_path))).read_text()
    assert f"```yaml\n{best_config.rstrip()}\n```" in text
    cost = {row["item"]: row["value"] for row in markdown_table(text, "### Cost")}
    assert cost["total cost"] == usd(parent.data.metrics["cost_usd_total"])
    assert cost["saved by pruning"].startswith(usd(parent.data.metrics["cost_usd_saved_by_pruning"]) + " (")
    record = {row["item"]: row["value"] for row in markdown_table(text, "Reproducibility record")}
    assert record["data sha256: train"] == parent.data.tags["sweeper.data_sha256.train"]
    assert record["version: torch"] == parent.data.tags["sweeper.versions.torch"]
    assert record["seed: search.seed"] == "3"
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
    assert len(re.findall(r"!\[", text)) == 5  # curves, parallel, progress, cost, the live forecast


def test_two_sweeps_side_by_side(finished_sweep, chromium, tmp_path):
    """A second tiny sweep in a copy of the shared store, then one report over both."""
    shutil.copy(finished_sweep.workdir / "mlflow.db", tmp_path / "mlflow.db")
    raw = small_sweep(
        "second",
        training={"max_steps": 10, "eval_every": 10},
        search={"method": "random", "num_trials": 2, "seed": 1,
                "parameters": {"training.learning_rate": {"distribution": "log_uniform", "low": 1e-3, "high": 2e-2}}},
        early_stopping={"scheduler": "none"},
        output_dir=str(tmp_path / "sweeps" / "second"),
    )
    started = run_cli("start", str(write_yaml(tmp_path / "second.yaml", raw)), cwd=tmp_path, timeout=600)
    assert started.returncode == 0, started.stdout + started.stderr

    out = tmp_path / "both"
    result = run_cli("report", "shared", "second", "--out", str(out), cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Best trials side by side" in result.stdout
    text = (out / "report.md").read_text()
    assert text.startswith("# Sweep comparison: shared vs second\n")
    diff = {row["key"]: (row["shared"], row["second"]) for row in markdown_table(text, "### Config differences")}
    assert diff["search.method"] == ("tpe", "random")
    assert diff["training.max_steps"] == ("30", "10")
    assert diff["early_stopping.scheduler"] == ("asha", "none")
    assert "name" not in diff and "lora.r" not in diff
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    best = {row["sweep"]: row for row in markdown_table(text, "### Best trials side by side")}
    for name in ("shared", "second"):
        parent, _ = runs_of(client, name)
        assert best[name]["value"] == f"{parent.data.metrics['best_eval_loss']:.4f}"
        assert best[name]["sweep cost"] == usd(parent.data.metrics["cost_usd_total"])
    assert best["second"]["completed"] == "2" and best["second"]["steps"] == "10"
    assert "## Sweep shared" in text and "## Sweep second" in text

    expected = {"comparison-progress", "comparison-best-curves",
                *(f"shared-{s}" for s in ("curves", "parallel", "progress", "cost", "forecast")),
                *(f"second-{s}" for s in ("curves", "parallel", "progress", "cost", "forecast"))}
    assert_renders(chromium, out / "index.html", tmp_path, expected)


def test_bad_input_is_one_clear_line_and_exit_2(finished_sweep, tmp_path):
    unknown = run_cli("report", "shared", "nope", "--out", str(tmp_path / "r"), cwd=finished_sweep.workdir, timeout=300)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        f"error: NAME: no sweep named 'nope' in {finished_sweep.tracking_uri}; known sweeps: shared"
    )
    assert not (tmp_path / "r").exists(), "a report of no sweep left its folder"

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unwritable = run_cli("report", "shared", "--out", str(blocker / "r"), cwd=finished_sweep.workdir, timeout=300)
    assert unwritable.returncode == 2 and "Traceback" not in unwritable.stderr
    assert unwritable.stderr.startswith(f"error: --out: cannot create {blocker / 'r'}: {blocker} is a file; ")
