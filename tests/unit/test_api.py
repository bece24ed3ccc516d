"""The Python API answers as the CLI does, through frames: a store written by the real
tracker (driven by hand, no Tune) read back with sweeper.status / sweeps / report."""

import json
import os
import subprocess
import sys

import polars as pl
import pytest

import sweeper
from sweeper.errors import UserError
from tests.conftest import small_sweep
from tests.unit.test_run_reader import write_sweep


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    return write_sweep(folder, "nb", {
        "a": ("completed", [(10, 2.0), (20, 1.6), (30, 1.5)]),
        "b": ("pruned", [(10, 2.4)]),
        "c": ("completed", [(10, 2.1), (20, 1.4), (30, 1.3)]),
    })


def test_status_is_a_frame_of_trials_with_their_parameters(store_uri):
    trials = sweeper.status("nb", tracking_uri=store_uri)
    assert isinstance(trials, pl.DataFrame)
    assert trials["trial_number"].to_list() == [1, 2, 3]
    assert trials["state"].to_list() == ["completed", "pruned", "completed"]
    assert trials["metric"].to_list() == [1.5, 2.4, 1.3]
    assert trials["training.learning_rate"].to_list() == pytest.approx([1e-1, 1e-2, 1e-3])


def test_status_reads_mlflow_tracking_uri_like_the_cli(store_uri, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store_uri)
    assert sweeper.status("nb").height == 3
    assert sweeper.sweeps()["sweep"].to_list() == ["nb"]


def test_an_unknown_sweep_is_a_keyed_error(store_uri):
    with pytest.raises(UserError, match="nb2"):
        sweeper.status("nb2", tracking_uri=store_uri)


def test_report_writes_the_files_and_returns_the_leaderboard(store_uri, tmp_path):
    written = sweeper.report("nb", out=tmp_path / "r", tracking_uri=store_uri)
    assert written.html.is_file() and written.markdown.is_file()
    assert written.leaderboard["trial"].to_list()[:2] == [3, 1]  # completed, best first


def test_start_rejects_an_invalid_spec_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = small_sweep("bad", search={"num_trials": 0})
    with pytest.raises(UserError, match="search.num_trials"):
        sweeper.start(raw)
    assert not (tmp_path / "sweeps").exists()


def test_importing_the_package_and_its_api_loads_neither_ray_nor_torch():
    code = "import sys, sweeper, sweeper.api; sweeper.status; print(json.dumps([m for m in ('ray', 'torch') if m in sys.modules]))"
    result = subprocess.run(
        [sys.executable, "-c", "import json; " + code], capture_output=True, text=True, env=os.environ, check=True
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
