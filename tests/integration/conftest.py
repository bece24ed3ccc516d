"""One real sweep shared by the integration tests that only read what it left behind
(terminal output, sweep folder, MLflow store): 5 trials on 2 slots with ASHA."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import small_sweep, write_yaml


def run_cli(*args, cwd, timeout=900) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "sweeper.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@dataclass
class FinishedSweep:
    workdir: Path
    yaml: Path
    result: subprocess.CompletedProcess
    name: str

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.workdir / 'mlflow.db'}"


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory) -> FinishedSweep:
    workdir = tmp_path_factory.mktemp("shared-sweep")
    raw = small_sweep("shared", search={"num_trials": 5, "seed": 3})
    path = write_yaml(workdir / "shared.yaml", raw)
    result = run_cli("start", str(path), cwd=workdir, timeout=600)
    return FinishedSweep(workdir, path, result, "shared")
