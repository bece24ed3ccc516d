"""The examples run as a user runs them, each with a tiny sweep in its own tmp_path:
examples/quickstart.py as a script, examples/notebook.ipynb executed cell by cell in a
kernel of this environment. What a user relies on: the sweep finishes, the frames hold
its trials, the best trial is printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

import sweeper
from tests.conftest import REPO

pytestmark = pytest.mark.integration

EXAMPLES = REPO / "examples"
# Two trials of 20 steps: ASHA ranks them at step 10 (eval_every), one trains to the end.
TRIALS, MAX_STEPS = 2, 20


def _finished_trials(workdir, name: str):
    trials = sweeper.status(name, tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    assert trials.height == TRIALS, trials
    assert set(trials["state"]) <= {"completed", "pruned"}, trials
    assert "completed" in set(trials["state"]), trials
    return trials


def test_the_quickstart_script_runs_a_sweep_and_prints_its_best_trial(tmp_path):
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), "--trials", str(TRIALS), "--max-steps", str(MAX_STEPS)],
        cwd=tmp_path, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output

    trials = _finished_trials(tmp_path, "quickstart")
    completed = trials.filter(trials["state"] == "completed").sort("metric")
    best = re.search(r"^Best trial: (\d+), eval_loss=([\d.]+), training\.learning_rate=\S+, lora\.r=\d+", result.stdout, re.M)
    assert best, output
    assert int(best.group(1)) == completed["trial_number"][0]
    assert float(best.group(2)) == pytest.approx(completed["metric"][0], abs=1e-4)
    assert (tmp_path / "sweep-reports" / "quickstart" / "index.html").is_file(), output


def test_the_notebook_starts_a_sweep_and_reads_its_frames(tmp_path):
    notebook = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    # As papermill does: the test's values in a cell after the one tagged `parameters`
    # (the data by absolute path, since the notebook runs in tmp_path, not examples/).
    at = next(i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", []))
    notebook.cells.insert(at + 1, nbformat.v4.new_code_cell(
        f"TRIALS = {TRIALS}\nMAX_STEPS = {MAX_STEPS}\nDATA = Path({str(REPO / 'data' / 'sft')!r})"
    ))
    NotebookClient(notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    trials = _finished_trials(tmp_path, "notebook")
    outputs = {cell.id: cell.outputs for cell in notebook.cells if cell.cell_type == "code"}

    def shown(cell_id: str) -> str:
        return "".join(output.get("data", {}).get("text/plain", "") for output in outputs[cell_id])

    best = trials.filter(trials["state"] == "completed").sort("metric")["trial_number"][0]
    assert re.search(rf"^│ {best} +┆", shown("best"), re.M), shown("best")
    assert re.search(r"^│ notebook +┆ finished", shown("sweeps"), re.M), shown("sweeps")
    assert any("application/vnd.plotly.v1+json" in output.get("data", {}) for output in outputs["plot"]), outputs["plot"]
