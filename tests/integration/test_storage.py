"""`storage.uri: s3://bucket/prefix` on a real S3-compatible server (moto on loopback): a
sweep's Tune state and every Train checkpoint go to the bucket, not to the sweep folder,
and `sweep promote`, `sweep export` and `sweep report` work from another folder after the
sweep folder is gone, reading the checkpoint and the tokenizer from the bucket. The
credentials appear in no output and no MLflow run. Storage that cannot be written is
one keyed line before anything starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import small_sweep, write_yaml
from tests.integration.s3_server import s3_server

pytestmark = pytest.mark.integration

BUCKET = "sweeps"


@pytest.fixture
def s3(tmp_path):
    with s3_server(tmp_path / "moto.log") as server:
        server.client().create_bucket(Bucket=BUCKET)
        yield server


def sweep_cli(*args, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeper.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RAY_ADDRESS", "MLFLOW_"))}
    env.update(COLUMNS="200", **extra)
    return env


def test_a_sweep_on_s3_storage_is_promoted_from_another_folder_after_its_folder_is_gone(s3, tmp_path, monkeypatch):
    workdir, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    workdir.mkdir()
    elsewhere.mkdir()
    raw = small_sweep(
        "ons3",
        training={"max_steps": 20, "eval_every": 10},
        search={"num_trials": 2, "seed": 1},
        early_stopping={"scheduler": "none"},
        storage={"uri": f"s3://{BUCKET}/team/ons3"},
    )
    path = write_yaml(workdir / "ons3.yaml", raw)
    env = clean_env(**s3.env)
    started = sweep_cli("start", str(path), cwd=workdir, env=env)
    assert started.returncode == 0, started.stdout + started.stderr

    keys = s3.keys(BUCKET, "team/ons3/")
    assert "team/ons3/tune/tuner.pkl" in keys, keys
    assert "team/ons3/sweep.yaml" in keys and "team/ons3/tokenizer/tokenizer_config.json" in keys
    adapters = [k for k in keys if k.startswith("team/ons3/trials/") and k.endswith("/adapter_config.json")]
    assert len(adapters) == 2, keys  # one checkpoint kept per trial, both trials completed
    local = workdir / "sweeps" / "ons3"
    assert (local / "sweep.yaml").is_file() and not (local / "trials").exists() and not (local / "tune").exists()

    tracking = f"sqlite:///{workdir / 'mlflow.db'}"
    import mlflow

    client = mlflow.MlflowClient(tracking)
    runs = client.search_runs([client.get_experiment_by_name("sweeper").experiment_id])
    recorded = " ".join(f"{run.data.tags} {run.data.params}" for run in runs)
    assert f"s3://{BUCKET}/team/ons3/trials/" in recorded  # checkpoint URIs on the trial runs
    assert s3.env["AWS_SECRET_ACCESS_KEY"] not in recorded + started.stdout + started.stderr

    shutil.rmtree(workdir / "sweeps")  # promote, export and report need only MLflow and the bucket
    promoted = sweep_cli("promote", "ons3", "--tracking-uri", tracking, cwd=elsewhere, env=env)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert "registered ons3 version 1" in promoted.stdout
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)  # MLflow resolves models:/ URIs through it
    model = Path(mlflow.artifacts.download_artifacts("models:/ons3@champion", dst_path=str(tmp_path / "model")))
    assert (model / "artifacts" / "adapter" / "adapter_config.json").is_file()

    exported = sweep_cli("export", "ons3", "--tracking-uri", tracking, cwd=elsewhere, env=env)
    assert exported.returncode == 0 and "learning_rate" in exported.stdout, exported.stdout + exported.stderr
    reported = sweep_cli("report", "ons3", "--tracking-uri", tracking, "--out", "r", cwd=elsewhere, env=env)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert (elsewhere / "r" / "index.html").is_file()

    # Without the credentials and the endpoint, the checkpoint cannot be read: a keyed line.
    blind = sweep_cli("promote", "ons3", "--tracking-uri", tracking, cwd=elsewhere, env=clean_env())
    assert blind.returncode == 2 and "error: --trial: the adapter checkpoint of trial" in blind.stderr, blind.stderr


def test_storage_that_cannot_be_written_is_one_keyed_line_before_anything_starts(s3, tmp_path):
    raw = small_sweep("nobucket", storage={"uri": "s3://no-such-bucket/x"})
    path = write_yaml(tmp_path / "nobucket.yaml", raw)
    refused = sweep_cli("start", str(path), cwd=tmp_path, env=clean_env(**s3.env), timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "error: storage.uri: cannot write to s3://no-such-bucket/x (" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "sweeps").exists() and not (tmp_path / "mlflow.db").exists()
