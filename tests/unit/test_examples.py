"""The examples as committed, without Ray: the notebook carries no outputs, and the
script's smaller quickstart is a valid spec of the trials and steps asked for. They are
run, with a sweep, by tests/integration/test_examples.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat

from sweeper.spec._load import load_spec, validate_spec
from tests.conftest import REPO

EXAMPLES = REPO / "examples"


def test_the_notebook_is_committed_without_outputs():
    notebook = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.id
    assert any("parameters" in cell.metadata.get("tags", []) for cell in code)


def test_the_script_runs_the_shipped_quickstart_or_a_smaller_one(tmp_path):
    spec = importlib.util.spec_from_file_location("quickstart_example", EXAMPLES / "quickstart.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    shipped = load_spec(REPO / "search_spaces" / "quickstart.yaml")
    assert validate_spec(example.quickstart_spec(), base_dir=tmp_path) == shipped
    small = validate_spec(example.quickstart_spec(trials=2, max_steps=20), base_dir=tmp_path)
    assert (small.search.num_trials, small.training.max_steps) == (2, 20)
    assert Path(small.data.train).is_file() and Path(small.data.eval).is_file()
