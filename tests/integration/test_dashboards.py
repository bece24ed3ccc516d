"""The UIs users watch, on one real sweep: the Ray dashboard during the sweep (its REST API
with token auth, and the Jobs and Actors pages in headless Chromium), then optuna-dashboard
(`sweep dashboard`) and the MLflow UI (experiment, a trial's eval-loss chart, the
registered model after `sweep promote`). Set SWEEPER_DOCS_SCREENSHOTS to a folder (docs/)
to keep the screenshots there."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import small_sweep, wait_for, write_yaml
from tests.integration.browser import visit
from tests.integration.conftest import run_cli
from tests.ports import free_port

pytestmark = pytest.mark.integration

NAME = "watched"
RAY = str(Path(sys.executable).with_name("ray"))


def get_json(url: str, token: str | None = None):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.load(response)


def poll_json(url: str, token: str):
    """`get_json`, or None while the dashboard answers 5xx: its state API answers 500 when
    the GCS is slow to reply, as it is on a loaded machine, and the next poll succeeds."""
    try:
        return get_json(url, token)
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            return None
        raise


def keep_screenshot(path: Path, name: str) -> None:
    folder = os.environ.get("SWEEPER_DOCS_SCREENSHOTS")
    if folder:
        shutil.copyfile(path, Path(folder) / name)


@pytest.fixture(scope="module")
def live_sweep(tmp_path_factory, chromium):
    """A sweep watched while it runs: what the Ray dashboard's REST API and pages showed,
    then the finished sweep's folder."""
    workdir = tmp_path_factory.mktemp("watched")
    raw = small_sweep(NAME, output_dir=str(workdir / "sweeps" / NAME))
    raw["search"]["num_trials"] = 4
    yaml_file = write_yaml(workdir / f"{NAME}.yaml", raw)
    driver = subprocess.Popen(
        [sys.executable, "-m", "sweeper.cli", "start", str(yaml_file)], cwd=workdir,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    seen: dict = {"lines": []}
    try:
        for line in driver.stdout:
            seen["lines"].append(line)
            if line.startswith("Ray dashboard:"):
                break
        url_line = seen["lines"][-1]
        seen["url_line"] = url_line
        base = re.search(r"http://[\d.:]+", url_line).group()
        token = subprocess.run([RAY, "get-auth-token"], capture_output=True, text=True, check=True).stdout.strip()
        try:
            get_json(f"{base}/api/jobs/")
            seen["without_token"] = 200
        except urllib.error.HTTPError as exc:
            seen["without_token"] = exc.code

        def sweep_job():
            jobs = poll_json(f"{base}/api/jobs/", token) or []
            return next((j for j in jobs if (j.get("metadata") or {}).get("job_name") == NAME), None)

        seen["job"] = wait_for(sweep_job, 120, "the sweep's job", every=1)

        def alive(class_name):
            def check():
                listing = poll_json(f"{base}/api/v0/actors?detail=1&limit=1000", token)
                actors = listing["data"]["result"]["result"] if listing else []
                return [a for a in actors if a["state"] == "ALIVE" and a["class_name"] == class_name] or None
            return check

        seen["trial_actors"] = wait_for(alive("ImplicitFunc"), 180, "a trial actor", every=1)
        cookie = [{"name": "ray-authentication-token", "value": token, "url": base}]
        for page, expect in (("jobs", ("Name", NAME)), ("actors", ("ImplicitFunc", f"sweep-{NAME}"))):
            seen[page] = visit(chromium, f"{base}/#/{page}", workdir / f"ray-{page}.png", workdir / f"profile-{page}",
                               expect=expect, cookies=cookie, timeout_s=60, size=(1400, 900 if page == "jobs" else 1900))
        for line in driver.stdout:
            seen["lines"].append(line)
        driver.wait(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    seen["returncode"] = driver.returncode
    seen["workdir"] = workdir
    return seen


def test_ray_dashboard_names_the_sweep(live_sweep):
    assert live_sweep["returncode"] == 0, "".join(live_sweep["lines"])[-3000:]
    assert "ray get-auth-token" in live_sweep["url_line"]
    assert live_sweep["without_token"] == 401
    metadata = live_sweep["job"]["metadata"]
    assert metadata["sweeper.sweep"] == NAME and metadata["sweeper.num_trials"] == "4"
    # A trial actor trains its trials (one worker each) and names its sweep; the trials
    # are numbered as in the live table and `sweep status`: 1 to 4.
    assert {a["repr_name"] for a in live_sweep["trial_actors"]} == {f"sweep-{NAME}"}
    client = MlflowClient(f"sqlite:///{live_sweep['workdir'] / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sweeper")
    numbers = {
        int(run.data.tags["sweeper.trial_number"])
        for run in client.search_runs([experiment.experiment_id], "tags.`sweeper.trial_number` != ''")
    }
    assert numbers == set(range(1, 5))
    assert f"sweep-{NAME}" in live_sweep["actors"].text and NAME in live_sweep["jobs"].text
    for page in ("jobs", "actors"):
        keep_screenshot(live_sweep[page].screenshot, f"ray-dashboard-{page}.png")


def test_optuna_dashboard_shows_every_trial(live_sweep, chromium):
    workdir = live_sweep["workdir"]
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "sweeper.cli", "dashboard", NAME, "--port", str(port)], cwd=workdir,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        url = re.search(r"http://\S+", server.stdout.readline()).group()
        study = wait_for(lambda: _try_json(f"http://127.0.0.1:{port}/api/studies/1"), 60, "optuna-dashboard", every=1)
        states = sorted(t["state"] for t in study["trials"])
        assert len(states) == 4 and "Pruned" in states and "Complete" in states
        assert all(t["intermediate_values"] for t in study["trials"])
        page = visit(chromium, url, workdir / "optuna.png", workdir / "profile-optuna",
                     expect=("History", "Intermediate values"), size=(1400, 2300))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "Intermediate values" in page.text and page.console_errors == []
    keep_screenshot(page.screenshot, "optuna-dashboard.png")


def _try_json(url):
    try:
        return get_json(url)
    except OSError:
        return None


def test_mlflow_ui_opens_on_runs_with_the_registered_model(live_sweep, chromium):
    workdir = live_sweep["workdir"]
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    promoted = run_cli("promote", NAME, "--tracking-uri", uri, cwd=workdir)
    assert promoted.returncode == 0, promoted.stderr
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("sweeper")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    child = client.search_runs([experiment.experiment_id], "tags.`sweeper.state` = 'completed'")[0]
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("mlflow")), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    # MLflow 3.17's UI has a UI-wide GenAI / Model training switch (default GenAI) that
    # wins over the experiment's tag; the links sweep start prints set it.
    ml = "workflowType=machine_learning"
    pages = {
        "experiment": (f"{base}/#/experiments/{experiment.experiment_id}?{ml}", (NAME, "Runs")),
        "trial-chart": (
            f"{base}/#/experiments/{experiment.experiment_id}/runs/{child.info.run_id}/model-metrics?{ml}",
            ("eval_loss",),
        ),
        "registered-model": (f"{base}/#/models/{NAME}?{ml}", ("champion",)),
    }
    visits = {}
    try:
        wait_for(lambda: _try_status(f"{base}/health"), 120, "the MLflow UI", every=1)
        for slug, (url, expect) in pages.items():
            visits[slug] = visit(chromium, url, workdir / f"mlflow-{slug}.png", workdir / f"profile-mlflow-{slug}",
                                 expect=expect, size=(1400, 1000))
    finally:
        server.terminate()
        server.wait(timeout=30)
    for slug, (_, expect) in pages.items():
        assert all(text in visits[slug].text for text in expect), (slug, visits[slug].text[:2000])
        keep_screenshot(visits[slug].screenshot, f"mlflow-{slug}.png")


def _try_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False
