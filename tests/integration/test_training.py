"""The SFT loop in one plain process on the built-in model: it learns, the landscape
depends on learning rate and rank, and a seed fixes the result."""

import shutil
import time

import pytest

from sweeper.spec._load import validate_spec
from trainables import sft
from trainables.common import current_workers
from trainables.data import tokenize_sft
from trainables.models import BUILTIN_TINY_MODEL, add_lora, load_base_model, load_tokenizer, resolve_model_source
from tests.conftest import REPO, small_sweep

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def setup():
    raw = small_sweep("train", training={"max_steps": 60, "eval_every": 20}, early_stopping={"scheduler": "none"})
    spec = validate_spec(raw, base_dir=REPO)
    source = resolve_model_source(BUILTIN_TINY_MODEL)
    tokenizer = load_tokenizer(source)
    data = {
        "train": tokenize_sft(spec.data.train, tokenizer, 96, "data.train"),
        "eval": tokenize_sft(spec.data.eval, tokenizer, 96, "data.eval"),
    }
    return spec, source, data


def run(setup, **overrides) -> list[dict]:
    spec, source, data = setup
    reports = []
    sft.train(spec.trial_config().with_values(overrides), data, source, lambda m, c: reports.append((m, c)), time.time())
    assert all(checkpoint is not None for _, checkpoint in reports)
    return [m for m, _ in reports]


def starting_eval_loss(setup) -> float:
    spec, source, data = setup
    model = add_lora(load_base_model(source), spec.lora)
    return sft.evaluate(model, data["eval"], spec.training, current_workers())


def test_fine_tuning_learns_and_depends_on_learning_rate_and_rank(setup):
    start = starting_eval_loss(setup)
    good = run(setup, **{"training.learning_rate": 5e-3, "lora.r": 16})
    low_lr = run(setup, **{"training.learning_rate": 1e-4, "lora.r": 16})
    small_rank = run(setup, **{"training.learning_rate": 5e-3, "lora.r": 1})
    assert [m["step"] for m in good] == [20, 40, 60]
    assert good[-1]["eval_loss"] < start - 2.0, (start, good[-1])
    assert low_lr[-1]["eval_loss"] > good[-1]["eval_loss"] + 1.0
    assert small_rank[-1]["eval_loss"] > good[-1]["eval_loss"] + 0.1
    for key in ("train_loss", "learning_rate", "tokens_per_second", "train_cpu_share", "setup_seconds", "eval_perplexity"):
        assert good[-1][key] > 0


def test_same_seed_same_run(setup):
    first = run(setup, **{"training.max_steps": 20, "training.eval_every": 10})
    second = run(setup, **{"training.max_steps": 20, "training.eval_every": 10})
    other_seed = run(setup, **{"training.max_steps": 20, "training.eval_every": 10, "training.seed": 1})
    assert [m["eval_loss"] for m in first] == [m["eval_loss"] for m in second]
    assert first[-1]["eval_loss"] != other_seed[-1]["eval_loss"]


def test_resuming_from_a_checkpoint_continues_the_same_run(setup, tmp_path):
    spec, source, data = setup
    # With dropout (0.05 by default): the checkpoint carries the random state it draws from.
    trial = spec.trial_config().with_values({"training.max_steps": 20, "training.eval_every": 10})
    assert trial.lora.dropout > 0
    saved = {}

    def keep_checkpoints(metrics, checkpoint_dir):
        target = tmp_path / f"step{metrics['step']}"
        shutil.copytree(checkpoint_dir, target)
        saved[metrics["step"]] = (metrics, target)

    sft.train(trial, data, source, keep_checkpoints, time.time())
    resumed = []
    sft.train(trial, data, source, lambda m, c: resumed.append(m), time.time(), resume_from=str(saved[10][1]))
    assert [m["step"] for m in resumed] == [20]
    assert resumed[0]["eval_loss"] == saved[20][0]["eval_loss"]
    assert resumed[0]["train_loss"] == saved[20][0]["train_loss"]


def test_non_finite_loss_stops_the_trial_before_the_step(setup):
    from trainables.common import NonFiniteLossError

    spec, source, data = setup
    trial = spec.trial_config().with_values({"chaos.fault": "nan_loss", "chaos.at_step": 3})
    reports = []
    with pytest.raises(NonFiniteLossError, match="loss is nan at step 3"):
        sft.train(trial, data, source, lambda m, c: reports.append(m), time.time())
    assert reports == []


def test_a_compiled_trial_trains_the_same_run_and_saves_the_same_adapter(setup, tmp_path):
    """training.compile (torch.compile, inductor, in place): the losses of the eager run up
    to float reordering, and the adapter promotion and resume read under the same keys.
    Without LoRA dropout: inductor draws its own dropout masks, so with dropout a compiled
    run is a different (still seeded) run."""
    from safetensors.torch import load_file

    steps = {"training.max_steps": 6, "training.eval_every": 3, "lora.dropout": 0.0}
    adapters = {}

    def keep_adapter(name):
        def report(metrics, checkpoint_dir):
            adapters[name] = load_file(f"{checkpoint_dir}/adapter_model.safetensors")
            reports.setdefault(name, []).append(metrics)
        return report

    reports: dict[str, list[dict]] = {}
    spec, source, data = setup
    for name, compiled in (("eager", False), ("compiled", True)):
        trial = spec.trial_config().with_values({**steps, "training.compile": compiled})
        sft.train(trial, data, source, keep_adapter(name), time.time())
    assert [m["step"] for m in reports["compiled"]] == [3, 6]
    for eager, compiled in zip(reports["eager"], reports["compiled"], strict=True):
        assert compiled["eval_loss"] == pytest.approx(eager["eval_loss"], rel=1e-4)
        assert compiled["train_loss"] == pytest.approx(eager["train_loss"], rel=1e-4)
    assert adapters["compiled"].keys() == adapters["eager"].keys()
