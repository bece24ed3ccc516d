"""`sweep dashboard NAME` serves optuna-dashboard on the sweep's study: its REST API (what
the dashboard's pages draw) lists every trial, the pruned and the paused (still running)
ones with their evaluations at the training step. The study is written by the real
searcher, driven by hand (no Ray cluster)."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import re

import optuna
import pytest

from sweeper.search._searcher import StepAwareOptunaSearch
from sweeper.search._space import to_optuna_distributions
from sweeper.search._study import study_url
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from tests.ports import free_port


def write_study(sweep_dir):
    spec = validate_spec(small_sweep("board"), base_dir=REPO)
    search = StepAwareOptunaSearch(
        space=to_optuna_distributions(spec), metric="eval_loss", mode="min",
        sampler=optuna.samplers.RandomSampler(seed=0), max_steps=30,
        study_name="board", storage_url=study_url(sweep_dir),
    )
    for trial_id in ("done", "pruned", "paused"):
        search.suggest(trial_id)
    for step, loss in ((10, 2.0), (20, 1.7), (30, 1.5)):
        search.on_trial_result("done", {"step": step, "eval_loss": loss})
    search.on_trial_complete("done", {"step": 30, "eval_loss": 1.5})
    search.on_trial_complete("pruned", {"step": 10, "eval_loss": 2.9})
    search.on_trial_result("paused", {"step": 10, "eval_loss": 2.2})  # waits at a rung


def sweep(*args, cwd):
    return subprocess.Popen(
        [sys.executable, "-m", "sweeper.cli", *args], cwd=cwd, env=os.environ,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def get_json(url: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.load(response)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_dashboard_serves_every_trial_with_its_intermediate_values(tmp_path):
    (tmp_path / "sweeps" / "board").mkdir(parents=True)
    write_study(tmp_path / "sweeps" / "board")
    port = free_port()
    server = sweep("dashboard", "board", "--port", str(port), cwd=tmp_path)
    try:
        first_line = server.stdout.readline()
        assert f"http://127.0.0.1:{port}/dashboard/studies/1" in first_line
        study = get_json(f"http://127.0.0.1:{port}/api/studies/1")
        by_state = {t["state"]: t for t in study["trials"]}
        assert set(by_state) == {"Complete", "Pruned", "Running"}
        values = {state: {v["step"]: v["value"] for v in t["intermediate_values"]} for state, t in by_state.items()}
        assert values == {"Complete": {10: 2.0, 20: 1.7, 30: 1.5}, "Pruned": {10: 2.9}, "Running": {10: 2.2}}
        printed_url = re.search(r"http://\S+", first_line).group()
        with urllib.request.urlopen(printed_url, timeout=10) as page:
            assert page.status == 200
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("setup, key", [("no study", "NAME"), ("busy port", "--port")])
def test_dashboard_errors_are_keyed_lines(tmp_path, setup, key):
    port = free_port()
    if setup == "busy port":
        (tmp_path / "sweeps" / "board").mkdir(parents=True)
        write_study(tmp_path / "sweeps" / "board")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        result = sweep("dashboard", "board", "--port", str(port), cwd=tmp_path)
        _, stderr = result.communicate(timeout=60)
    assert result.returncode == 2
    assert stderr.startswith(f"error: {key}:") and "Traceback" not in stderr
