"""Task dpo for real: the loss agrees with trl's DPOTrainer, a DPO run can start from an
SFT adapter, and a DPO sweep over beta and learning rate on a real Ray cluster learns
(eval reward accuracy above chance and above its value before training)."""

import re
import shutil
import tempfile
import time

import pytest
import torch

from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_dpo_sweep, small_sweep, write_yaml
from tests.integration.conftest import run_cli
from trainables import dpo, sft
from trainables.common import current_workers, shard_batches
from trainables.data import read_jsonl, tokenize_split
from trainables.models import (
    BUILTIN_TINY_MODEL,
    adapter_base,
    add_lora,
    load_base_model,
    load_tokenizer,
    resolve_model_source,
)

pytestmark = pytest.mark.integration

DPO_KEYS = ("eval_loss", "eval_rewards_chosen", "eval_rewards_rejected", "eval_rewards_margin", "eval_rewards_accuracy")


@pytest.fixture(scope="module")
def tiny():
    source = resolve_model_source(BUILTIN_TINY_MODEL)
    return source, load_tokenizer(source)


def accuracy_before_training(spec, source, data) -> float:
    """Eval reward accuracy of fresh adapters, through the same evaluation code as trials."""
    workers = current_workers()
    model = add_lora(load_base_model(source), spec.lora)
    reference = dpo.reference_logps(model, data["eval"], spec.training, workers)
    return dpo.evaluate(model, data["eval"], reference, spec, workers)["eval_rewards_accuracy"]


def test_loss_and_rewards_match_trl(tiny):
    """Our written-out loss is trl's: same eval loss and rewards as trl's DPOTrainer on the
    same pairs and the same (non-trivial) adapters, for every loss_type we offer."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    source, tokenizer = tiny
    spec = validate_spec(small_dpo_sweep("parity", training={"per_device_batch_size": 16}), base_dir=REPO)
    records = [record for _, record in read_jsonl(spec.data.eval, "data.eval")][:16]
    full = tokenize_split(spec.trial_config(), "eval", tokenizer)
    pairs = full.rows(list(range(16)))

    def model_with_adapters():
        torch.manual_seed(0)
        model = add_lora(load_base_model(source), spec.lora)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.05)  # fresh adapters are zero: policy == reference
        return model.eval()

    workers = current_workers()
    for loss_type in ("sigmoid", "ipo", "hinge"):
        trial = spec.trial_config().with_values({"dpo.loss_type": loss_type, "dpo.beta": 0.2})
        model = model_with_adapters()
        reference = dpo.reference_logps(model, pairs, trial.training, workers)
        ours = dpo.evaluate(model, pairs, reference, trial, workers)
        with tempfile.TemporaryDirectory() as output_dir:
            args = DPOConfig(
                output_dir=output_dir, beta=0.2, loss_type=[loss_type], per_device_eval_batch_size=16,
                max_length=96, bf16=False, use_cpu=True, report_to=[], disable_tqdm=True,
            )
            dataset = Dataset.from_list(records)
            trainer = DPOTrainer(
                model=model_with_adapters(), ref_model=load_base_model(source).eval(), args=args,
                train_dataset=dataset, eval_dataset=dataset, processing_class=tokenizer,
            )
            theirs = trainer.evaluate()
        assert ours["eval_rewards_margin"] != 0
        for key, trl_key in (
            ("eval_loss", "eval_loss"),
            ("eval_rewards_chosen", "eval_rewards/chosen"),
            ("eval_rewards_rejected", "eval_rewards/rejected"),
            ("eval_rewards_margin", "eval_rewards/margins"),
            ("eval_rewards_accuracy", "eval_rewards/accuracies"),
        ):
            assert ours[key] == pytest.approx(theirs[trl_key], rel=1e-4, abs=1e-6), (loss_type, key, ours, theirs)


def test_dpo_starts_from_an_sft_adapter(tiny, tmp_path):
    """model.name_or_path may be an SFT adapter: it is merged into its base, and that
    merged model is the DPO reference (not the bare base)."""
    source, tokenizer = tiny
    # A short SFT run in a plain process; keep its adapter checkpoint.
    sft_spec = validate_spec(
        small_sweep("sft", training={"max_steps": 40, "eval_every": 40}, early_stopping={"scheduler": "none"}),
        base_dir=REPO,
    )
    sft_data = {split: tokenize_split(sft_spec.trial_config(), split, tokenizer) for split in ("train", "eval")}
    adapter_dir = tmp_path / "sft-adapter"

    def keep_adapter(metrics, checkpoint_dir):
        shutil.copytree(checkpoint_dir, adapter_dir, dirs_exist_ok=True)

    sft.train(sft_spec.trial_config(), sft_data, source, keep_adapter, time.time())
    assert adapter_base(str(adapter_dir)) == source

    # DPO from it, configured the way a user would: the adapter directory as the model.
    raw = small_dpo_sweep("from-sft", model={"name_or_path": str(adapter_dir)}, early_stopping={"scheduler": "none"})
    spec = validate_spec(raw, base_dir=REPO)
    tokenizer = load_tokenizer(adapter_base(spec.model.name_or_path))
    data = {split: tokenize_split(spec.trial_config(), split, tokenizer) for split in ("train", "eval")}

    from peft import PeftModel

    workers = current_workers()

    @torch.no_grad()
    def scores(model) -> torch.Tensor:
        batches = shard_batches(len(data["eval"]), spec.training.per_device_batch_size, workers)
        return torch.cat([dpo.sequence_logps(model, dpo.pair_batch(data["eval"], indices, workers)) for indices in batches])

    dpo_model = add_lora(load_base_model(spec.model.name_or_path), spec.lora)
    reference = torch.cat(dpo.reference_logps(dpo_model, data["eval"], spec.training, workers))
    sft_model = PeftModel.from_pretrained(load_base_model(source), str(adapter_dir)).eval()
    assert torch.allclose(reference, scores(sft_model), atol=1e-4)
    assert not torch.allclose(reference, scores(load_base_model(source).eval()), atol=1e-2)

    reports = []
    dpo.train(spec.trial_config(), data, spec.model.name_or_path, lambda metrics, checkpoint: reports.append(metrics), time.time())
    assert [m["step"] for m in reports] == [10, 20, 30]
    assert reports[-1]["eval_rewards_accuracy"] > 0.5, reports[-1]


@pytest.mark.story
def test_dpo_sweep_over_beta_and_learning_rate(tmp_path, tiny):
    """A DPO sweep through the CLI on a real local Ray cluster: ASHA on eval reward
    accuracy, the DPO metrics of every evaluation in the trials' MLflow child runs, and
    the best trial learned (reward accuracy above chance and above its value before
    training)."""
    from mlflow.tracking import MlflowClient

    raw = small_dpo_sweep("dpo", output_dir=str(tmp_path / "sweeps" / "dpo"))
    path = write_yaml(tmp_path / "dpo.yaml", raw)
    result = run_cli("start", str(path), cwd=tmp_path, timeout=600)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "4 trials, 2 at a time" in out
    best_line = next(line for line in out.splitlines() if line.startswith("Best trial"))
    best = float(re.search(r"eval_rewards_accuracy=([0-9.]+)", best_line).group(1))
    assert "dpo.beta=" in best_line and "training.learning_rate=" in best_line

    spec = validate_spec(raw, base_dir=REPO)
    source, tokenizer = tiny
    data = {split: tokenize_split(spec.trial_config(), split, tokenizer) for split in ("train", "eval")}
    before = accuracy_before_training(spec, source, data)
    print(f"{best_line}; accuracy before training: {before}")
    assert best > 0.5 and best > before, (best, before, best_line)

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sweeper")
    children = [
        run for run in client.search_runs([experiment.experiment_id]) if run.data.tags["sweeper.kind"] == "trial"
    ]
    assert len(children) == 4
    for child in children:
        steps = [p.step for p in client.get_metric_history(child.info.run_id, "eval_rewards_accuracy")]
        assert steps and steps == list(range(10, steps[-1] + 1, 10))
        for key in DPO_KEYS:
            assert len(client.get_metric_history(child.info.run_id, key)) == len(steps), key
        assert "dpo.beta" in child.data.params
    best_child = max(
        (c for c in children if c.data.tags["sweeper.state"] == "completed"),
        key=lambda c: c.data.metrics["eval_rewards_accuracy"],
    )
    assert best_child.data.metrics["eval_rewards_accuracy"] == pytest.approx(best, abs=1e-4)
    assert best_child.data.metrics["eval_rewards_margin"] > 0
