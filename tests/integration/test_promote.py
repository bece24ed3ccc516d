"""`sweep promote` and `sweep export` on the shared real sweep: the registered model loads
back through MLflow's own API and reproduces the trial's eval loss; promoting again moves
the alias; bad input changes nothing."""

from pathlib import Path

import mlflow
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient
from peft import PeftModel

from sweeper.promote._registry import ADAPTER_FILES
from sweeper.spec._load import validate_spec
from tests.conftest import SFT_EVAL
from tests.integration.conftest import run_cli
from trainables.common import Workers
from trainables.data import tokenize_sft
from trainables.sft import evaluate

pytestmark = pytest.mark.integration


def sweep_runs(client: MlflowClient):
    experiment = client.get_experiment_by_name("sweeper")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`sweeper.sweep_name` = 'shared'")
    (parent,) = [r for r in runs if r.data.tags["sweeper.kind"] == "sweep"]
    children = {r.info.run_id: r for r in runs if r.data.tags["sweeper.kind"] == "trial"}
    return parent, children


def registry_state(client: MlflowClient):
    """Everything a promotion may write: registered models, versions, aliases, run count."""
    models = {
        m.name: (m.aliases, sorted(v.version for v in client.search_model_versions(f"name = '{m.name}'")))
        for m in client.search_registered_models()
    }
    experiment = client.get_experiment_by_name("sweeper")
    return models, len(client.search_runs([experiment.experiment_id]))


def eval_loss_of(loaded, spec) -> float:
    """Eval loss of a loaded pyfunc model on the shipped eval set, tokenized and computed
    as the sweep's trials did (trainables.data.tokenize_sft, trainables.sft.evaluate)."""
    served = loaded.unwrap_python_model()
    split = tokenize_sft(SFT_EVAL, served.tokenizer, spec.data.max_length, "data.eval")
    return evaluate(served.model, split, spec.training, Workers(0, 1, torch.device("cpu")))


def assert_refused(finished_sweep, client, *args, says: str):
    before = registry_state(client)
    result = run_cli("promote", *args, cwd=finished_sweep.workdir, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert registry_state(client) == before


@pytest.mark.story
def test_promote_loads_back_and_moves_the_alias(finished_sweep, monkeypatch, tmp_path):
    assert finished_sweep.result.returncode == 0, finished_sweep.result.stderr
    uri = finished_sweep.tracking_uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # for models:/ URIs (registry = tracking store)
    client = MlflowClient(uri, registry_uri=uri)
    parent, children = sweep_runs(client)
    best = children[parent.data.tags["sweeper.best_run_id"]]
    trial_end_time = best.info.end_time
    # Adapters live in the sweep folder (not in Ray's session folder, which goes away).
    checkpoint = Path(best.data.tags["sweeper.checkpoint_path"])
    assert checkpoint.is_relative_to(finished_sweep.workdir / "sweeps" / "shared" / "trials"), checkpoint

    # Bad input first: one keyed line, exit 2, nothing written.
    assert registry_state(client)[0] == {}
    assert_refused(finished_sweep, client, "nope", says="NAME: no sweep named 'nope'")
    assert_refused(finished_sweep, client, "shared", "--trial", "99", says="--trial: sweep 'shared' has no trial '99'")
    assert_refused(finished_sweep, client, "shared", "--alias", "latest",
                   says="--alias: 'latest' and version names such as 'v3' are reserved by MLflow")
    assert_refused(finished_sweep, client, "shared", "--tracking-uri", f"file://{finished_sweep.workdir}/mlruns",
                   says="is a file store")
    pruned = [c for c in children.values() if c.data.tags["sweeper.state"] == "pruned"]
    assert pruned, "ASHA pruned no trial of the shared sweep"
    pruned_number = pruned[0].data.tags["sweeper.trial_number"]
    assert_refused(finished_sweep, client, "shared", "--trial", pruned_number,
                   says=f"--trial: trial {pruned_number} was pruned at step")

    # First promotion: the best trial becomes version 1 under the alias champion.
    first = run_cli("promote", "shared", cwd=finished_sweep.workdir, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "registered shared version 1 (alias 'champion')" in first.stdout
    version = client.get_model_version_by_alias("shared", "champion")
    assert str(version.version) == "1"
    tags = version.tags
    assert tags["sweeper.sweep"] == "shared"
    assert tags["sweeper.trial_run_id"] == best.info.run_id
    assert tags["sweeper.parent_run_id"] == parent.info.run_id
    assert tags["sweeper.trial_id"] == best.data.tags["sweeper.trial_id"]
    assert tags["sweeper.metric"] == "eval_loss"
    assert float(tags["sweeper.metric_value"]) == best.data.metrics["eval_loss"]
    assert float(tags["sweeper.cost_usd"]) == best.data.metrics["cost_usd"]
    assert float(tags["sweeper.sweep_cost_usd"]) == parent.data.metrics["cost_usd_total"]
    assert tags["sweeper.merged"] == "false"
    promotion_run = client.get_run(version.run_id)
    assert promotion_run.data.tags["mlflow.parentRunId"] == best.info.run_id
    assert best.data.params.items() <= promotion_run.data.params.items()  # (+ the model config)
    # The trial's own run, the record of training, is untouched.
    assert client.get_run(best.info.run_id).info.end_time == trial_end_time

    # What the version holds: adapter, tokenizer, the trial's config and metrics.
    local = Path(mlflow.artifacts.download_artifacts("models:/shared/1", dst_path=str(tmp_path)))
    for name in ("adapter/adapter_config.json", "tokenizer/tokenizer_config.json", "best_config.yaml", "metrics.json"):
        assert (local / "artifacts" / name).is_file(), name
    assert not (local / "artifacts" / "merged").exists()
    # The adapter alone: what a checkpoint keeps for continuing training stays out.
    assert sorted(path.name for path in (local / "artifacts" / "adapter").iterdir()) == sorted(ADAPTER_FILES)
    config = validate_spec(yaml.safe_load((local / "artifacts" / "best_config.yaml").read_text()), base_dir=local)
    assert config.training.learning_rate == float(best.data.params["training.learning_rate"])

    # Load through MLflow's own API: a forward pass reproduces the trial's eval loss,
    # and the model generates text.
    loaded = mlflow.pyfunc.load_model("models:/shared@champion")
    reported = best.data.metrics["eval_loss"]
    assert eval_loss_of(loaded, config) == pytest.approx(reported, rel=1e-4)
    texts = loaded.predict(["What is 2 + 3?", "Name a colour."], params={"max_new_tokens": 12, "chat": True})
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    assert any(t.strip() for t in texts), texts

    # Promoting again (with merged weights) makes version 2 and moves the alias; version 1 stays.
    second = run_cli("promote", "shared", "--merge", cwd=finished_sweep.workdir, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "registered shared version 2 (alias 'champion', moved from version 1)" in second.stdout
    assert {k: str(v) for k, v in client.get_registered_model("shared").aliases.items()} == {"champion": "2"}
    kept = client.get_model_version("shared", "1")
    assert kept.tags == tags and kept.status == "READY" and kept.aliases == []
    assert client.get_model_version("shared", "2").tags["sweeper.merged"] == "true"
    merged = mlflow.pyfunc.load_model("models:/shared@champion")
    assert isinstance(loaded.unwrap_python_model().model, PeftModel)  # version 1: base + adapter
    assert not isinstance(merged.unwrap_python_model().model, PeftModel)  # version 2: merged weights
    assert eval_loss_of(merged, config) == pytest.approx(reported, rel=1e-3)

    # A refused promotion after that still changes nothing.
    assert_refused(finished_sweep, client, "shared", "--trial", pruned_number, says="pass --force")


def test_export_writes_the_trials_config(finished_sweep, tmp_path):
    client = MlflowClient(finished_sweep.tracking_uri)
    parent, children = sweep_runs(client)
    best_child = children[parent.data.tags["sweeper.best_run_id"]]
    other = next(c for c in children.values() if c.info.run_id != best_child.info.run_id)
    for child in (best_child, other):
        number = child.data.tags["sweeper.trial_number"]
        ref = number if child is best_child else child.data.tags["sweeper.trial_id"]  # --trial takes either
        out = tmp_path / f"trial-{number}.yaml"
        result = run_cli("export", "shared", "--trial", ref, "-o", str(out), cwd=finished_sweep.workdir, timeout=300)
        assert result.returncode == 0, result.stderr
        if child is best_child:  # the file as a user would check it
            check = run_cli("validate", str(out), cwd=tmp_path, timeout=120)
            assert check.returncode == 0, check.stderr
        spec = validate_spec(yaml.safe_load(out.read_text()), base_dir=tmp_path)
        assert spec.name == f"shared-trial-{number}" and spec.search.parameters == {}
        for path, value in child.data.params.items():
            section, field = path.split(".")
            assert str(getattr(getattr(spec, section), field)) == value
    best = run_cli("export", "shared", cwd=finished_sweep.workdir, timeout=300)
    assert best.returncode == 0, best.stderr
    best_number = best_child.data.tags["sweeper.trial_number"]
    assert best.stdout.startswith(f"# Trial {best_number} of sweep 'shared' (completed, eval_loss=")
    unknown = run_cli("export", "shared", "--trial", "zzz", cwd=finished_sweep.workdir, timeout=300)
    assert unknown.returncode == 2 and "--trial: sweep 'shared' has no trial 'zzz'" in unknown.stderr
