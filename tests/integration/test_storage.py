"""`storage.uri: s3://bucket/prefix` on a real S3-compatible server (moto on loopback):
storage that cannot be written is one keyed line before anything starts, also where only
the cluster's nodes cannot write it (a head started without the keys); the endpoint
travels to a head started before it was set. (A sweep whose Tune state and checkpoints go
to the bucket, then promoted, exported and reported from another folder with its own
folder gone, is test_multinode's `spread` sweep.)"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import small_sweep, write_yaml
from tests.integration import cli_process
from tests.integration.conftest import NODE_ENV, RAY, end_process_group, wait_for_port
from tests.integration.s3_server import s3_server
from tests.ports import free_port

pytestmark = pytest.mark.integration

BUCKET = "sweeps"


@pytest.fixture
def s3(tmp_path):
    with s3_server(tmp_path / "moto.log") as server:
        server.client().create_bucket(Bucket=BUCKET)
        yield server


def sweep_cli(*args, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return cli_process.run(list(args), cwd=cwd, env=env, timeout=timeout)


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RAY_ADDRESS", "MLFLOW_"))}
    env.update(COLUMNS="200", **extra)
    return env


@pytest.mark.fresh_store
def test_storage_that_cannot_be_written_is_one_keyed_line_before_anything_starts(s3, tmp_path):
    raw = small_sweep("nobucket", storage={"uri": "s3://no-such-bucket/x"})
    path = write_yaml(tmp_path / "nobucket.yaml", raw)
    refused = sweep_cli("start", str(path), cwd=tmp_path, env=clean_env(**s3.env), timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "error: storage.uri: cannot write to s3://no-such-bucket/x (" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "sweeps").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.fresh_store
def test_storage_uri_naming_an_object_is_one_keyed_line_before_anything_starts(s3, tmp_path):
    s3.client().put_object(Bucket=BUCKET, Key="team/a-file", Body=b"x")
    path = write_yaml(tmp_path / "onfile.yaml", small_sweep("onfile", storage={"uri": f"s3://{BUCKET}/team/a-file"}))
    refused = sweep_cli("start", str(path), cwd=tmp_path, env=clean_env(**s3.env), timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert [line for line in refused.stderr.splitlines() if line.startswith("error:")] == [
        f"error: storage.uri: s3://{BUCKET}/team/a-file is a file, not a folder; give a prefix (s3://bucket/prefix) "
        "or a folder"
    ], refused.stderr
    assert not (tmp_path / "sweeps").exists() and not (tmp_path / "mlflow.db").exists()
    assert s3.keys(BUCKET, "team/") == ["team/a-file"]


@contextlib.contextmanager
def head_started_without(tmp_path: Path, s3_env: dict, *, keys: bool):
    """A `ray start --head` node started, as by a user, before AWS_ENDPOINT_URL was set in
    the shell: none of the S3 variables but, with `keys`, the credentials. Its own HOME
    (token, no ~/.aws), ended by its pid (its whole session). Yields (address, client env
    with the endpoint and keys, as the driver's shell has them)."""
    home = tmp_path / "head-home"
    home.mkdir()
    env = clean_env(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    if keys:
        env.update({k: s3_env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")})
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, capture_output=True, check=True, timeout=120)
    port, dashboard = free_port(), free_port()
    ray_temp = tempfile.mkdtemp(prefix="s3ray-", dir="/tmp")  # short: Ray's Unix sockets live there
    log = open(tmp_path / "head.log", "wb")
    process = subprocess.Popen(
        [RAY, "start", "--head", "--block", "--port", str(port), "--dashboard-port", str(dashboard),
         "--num-cpus", "1", "--temp-dir", ray_temp, "--ray-client-server-port", str(free_port()),
         "--min-worker-port", "0", "--max-worker-port", "0", "--dashboard-agent-listen-port", str(free_port())],
        env={**env, **NODE_ENV}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        wait_for_port(port, process)
        driver_env = clean_env(**s3_env, RAY_AUTH_TOKEN_PATH=str(home / ".ray" / "auth_token"))
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard}", driver_env
    finally:
        end_process_group(process)
        log.close()
        shutil.rmtree(ray_temp, ignore_errors=True)


def one_trial_on_s3(name: str, tmp_path: Path) -> Path:
    raw = small_sweep(
        name,
        training={"max_steps": 10, "eval_every": 10},
        search={"num_trials": 1},
        early_stopping={"scheduler": "none"},
        storage={"uri": f"s3://{BUCKET}/nodes/{name}"},
    )
    return write_yaml(tmp_path / f"{name}.yaml", raw)


def test_the_endpoint_travels_to_a_head_started_before_it_was_set(s3, tmp_path):
    """Issue 35, item 3: before, the driver's check passed and every trial failed after 60 s
    ("Could not resolve host: sweeps.s3.us-east-1..."). The endpoint goes with the job's
    runtime_env; the keys do not (the dashboard shows a job's runtime_env)."""
    with head_started_without(tmp_path, s3.env, keys=True) as (address, dashboard, env):
        started = sweep_cli("start", str(one_trial_on_s3("travels", tmp_path)), "--address", address,
                            cwd=tmp_path, env=env, timeout=240)
        output = started.stdout + started.stderr
        assert started.returncode == 0, output
        assert f"sent with the job: AWS_DEFAULT_REGION=us-east-1, AWS_ENDPOINT_URL={s3.endpoint}" in output
        keys = s3.keys(BUCKET, "nodes/travels/")
        assert any(k.startswith("nodes/travels/trials/") and k.endswith("adapter_config.json") for k in keys), keys
        assert not any(".sweeper-node-check" in k for k in keys), keys
        jobs = dashboard_jobs(dashboard, Path(env["RAY_AUTH_TOKEN_PATH"]))
        job = next(j for j in jobs if (j.get("metadata") or {}).get("sweeper.sweep") == "travels")
        assert job["runtime_env"]["env_vars"]["AWS_ENDPOINT_URL_S3"] == s3.endpoint
        assert s3.env["AWS_SECRET_ACCESS_KEY"] not in json.dumps(jobs) + output
        assert s3.env["AWS_ACCESS_KEY_ID"] not in json.dumps(jobs)


@pytest.mark.fresh_store
def test_storage_the_nodes_cannot_write_is_one_keyed_line_before_any_trial(s3, tmp_path):
    """A head started without the keys: this machine writes the bucket, the node cannot.
    One keyed line, exit 2, before any trial; no sweep folder, no MLflow run."""
    with head_started_without(tmp_path, s3.env, keys=False) as (address, dashboard, env):
        refused = sweep_cli("start", str(one_trial_on_s3("blind", tmp_path)), "--address", address,
                            cwd=tmp_path, env=env, timeout=240)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert len(errors) == 1 and re.match(
        rf"error: storage\.uri: this machine can write to s3://{BUCKET}/nodes/blind, but node [\d.]+ cannot \(.*"
        r"ACCESS_DENIED.*\): it has no AWS credentials \(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE\)",
        errors[0],
    ), refused.stderr
    assert "Traceback" not in refused.stderr and s3.env["AWS_SECRET_ACCESS_KEY"] not in refused.stderr
    assert not (tmp_path / "sweeps").exists() and not (tmp_path / "mlflow.db").exists()
    assert "Sweep 'blind'" not in refused.stdout  # the tuner never started


def dashboard_jobs(dashboard: str, token_file: Path) -> list[dict]:
    """Every job of the cluster as the dashboard's REST API shows it (token auth)."""
    request = urllib.request.Request(
        f"{dashboard}/api/jobs/", headers={"Authorization": f"Bearer {token_file.read_text().strip()}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())
