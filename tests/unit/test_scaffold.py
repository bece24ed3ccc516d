"""`sweep init`: the file it writes validates as written, its space and sizes come from
the guidance and the data, the GPU sizing follows the memory forecast, and what it cannot
read is refused with one keyed line (exit 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sweeper.cli._app import app
from sweeper.errors import UserError
from sweeper.scaffold._arguments import Profile
from sweeper.scaffold._sizing import EVALUATIONS, MAX_STEPS, max_lengths, schedule
from sweeper.scaffold._writer import scaffold_sweep
from tests.conftest import REPO

runner = CliRunner()
SFT_TRAIN = REPO / "data" / "sft" / "train.jsonl"
DPO_TRAIN = REPO / "data" / "preference" / "train.jsonl"


def init(*args: str):
    return runner.invoke(app, ["init", *args])


def test_init_writes_a_commented_sft_sweep_that_validates(tmp_path):
    out = tmp_path / "search.yaml"
    result = init("--model", "builtin:tiny-llama", "--data", str(SFT_TRAIN), "-o", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith(f"# Run: sweep start {out}")
    raw = yaml.safe_load(text)
    assert raw["data"]["eval"].endswith("eval.jsonl")  # found beside the training file
    assert set(raw["search"]["parameters"]) == {"training.learning_rate", "lora.r", "training.warmup_ratio"}
    lines = text.splitlines()
    for key in raw["search"]["parameters"]:  # every searched range says where it comes from
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
        assert lines[at - 1].strip().startswith("#"), key
    assert "LoRA Without Regret" in text and "trl" in text
    assert raw["training"]["max_steps"] == raw["training"]["eval_every"] * EVALUATIONS

    validated = runner.invoke(app, ["validate", str(out)])
    assert validated.exit_code == 0, validated.output


def test_init_dpo_ranks_by_reward_accuracy_and_searches_beta(tmp_path):
    out = tmp_path / "dpo.yaml"
    result = init("--model", "builtin:tiny-llama", "--data", str(DPO_TRAIN), "--task", "dpo", "-o", str(out),
                  "--trials", "6", "--name", "my-dpo")
    assert result.exit_code == 0, result.output
    raw = yaml.safe_load(out.read_text())
    assert raw["name"] == "my-dpo" and raw["task"] == "dpo" and raw["search"]["num_trials"] == 6
    assert raw["search"]["metric"] == "eval_rewards_accuracy" and raw["search"]["goal"] == "maximize"
    assert raw["search"]["parameters"]["dpo.beta"] == {"distribution": "log_uniform", "low": 0.05, "high": 0.5}
    assert raw["dpo"]["max_prompt_length"] < raw["data"]["max_length"]
    assert runner.invoke(app, ["validate", str(out)]).exit_code == 0


def test_a_real_model_gets_the_published_learning_rates(tmp_path):
    sweep = scaffold_sweep(str(_model_folder(tmp_path, layers=2)), str(SFT_TRAIN), tmp_path / "s.yaml")
    rate = sweep.spec.search.parameters["training.learning_rate"]
    assert (rate.low, rate.high) == (5e-5, 8e-4)  # 4x either side of trl's LoRA 2e-4, 10x its full 2e-5
    dpo = scaffold_sweep(str(_model_folder(tmp_path, layers=2)), str(DPO_TRAIN), tmp_path / "d.yaml", task="dpo")
    rate = dpo.spec.search.parameters["training.learning_rate"]
    assert (rate.low, rate.high) == (1.25e-6, 2e-5)  # around trl's LoRA DPO 5e-6, 10x its full 5e-7
    assert dpo.spec.lora.alpha == 32 and "lora.alpha_per_rank" not in dpo.spec.search.parameters


@pytest.mark.parametrize(
    "examples, batch, steps, eval_every",
    [
        (2000, 16, 135, 5),  # one epoch: 125 steps, made 27 evaluations of 5
        (100, 16, 108, 4),  # 7 steps an epoch: at least 4 steps an evaluation
        (10, 8, 108, 4),  # fewer examples than a batch
        (1_000_000, 16, MAX_STEPS + 25, 75),  # a part of one epoch, 27 evaluations
    ],
)
def test_schedule_from_the_number_of_examples(examples, batch, steps, eval_every):
    plan = schedule(examples)
    assert (plan.batch, plan.max_steps, plan.eval_every) == (batch, steps, eval_every)


def test_max_length_from_the_99th_percentile():
    lengths = tuple([100] * 98 + [300, 5000])
    length, prompt, why = max_lengths(Profile(100, 100, lengths, ()), "sft")
    assert (length, prompt) == (320, None) and "98.0%" not in why and "5000" in why
    length, prompt, _ = max_lengths(Profile(100, 100, lengths, tuple([90] * 100)), "dpo")
    assert prompt == 96 and prompt < length


def test_gpu_sizing_follows_the_memory_forecast(tmp_path):
    eight_b = _model_folder(tmp_path, layers=32, hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=128256)
    roomy = scaffold_sweep(str(eight_b), str(SFT_TRAIN), tmp_path / "h100.yaml", gpu="h100")
    assert roomy.spec.training.per_device_batch_size == 16 and not roomy.spec.training.gradient_checkpointing
    tight = scaffold_sweep(str(eight_b), str(SFT_TRAIN), tmp_path / "4090.yaml", gpu="rtx4090")
    assert tight.spec.training.gradient_checkpointing and tight.spec.training.precision == "bf16"
    batch = tight.spec.training.per_device_batch_size * tight.spec.training.gradient_accumulation_steps
    assert batch == 16 and tight.memory.fits(24)
    assert tight.spec.cost.accelerator == "rtx4090" and tight.spec.resources.use_gpu

    long_data = tmp_path / "long" / "train.jsonl"
    long_data.parent.mkdir()
    long_data.write_text("".join(json.dumps({"prompt": "x" * 1500, "completion": "y" * 500}) + "\n" for _ in range(40)))
    shutil.copy(long_data, long_data.with_name("eval.jsonl"))
    quantized = scaffold_sweep(str(eight_b), str(long_data), tmp_path / "a10g.yaml", gpu="a10g")
    assert quantized.spec.model.quantization == "nf4" and quantized.memory.fits(24)
    assert "quantization: nf4" in quantized.text

    seventy_b = _model_folder(tmp_path / "70b", layers=80, hidden=8192, intermediate=28672, heads=64, kv_heads=8,
                              vocab=128256)
    with pytest.raises(UserError, match=r"^--gpu: .* does not fit a rtx4090"):
        scaffold_sweep(str(seventy_b), str(long_data), tmp_path / "no.yaml", gpu="rtx4090")


def test_eval_split_found_beside_the_training_file_by_name(tmp_path):
    train, evaluation = tmp_path / "qa_train.jsonl", tmp_path / "qa_validation.jsonl"
    lines = SFT_TRAIN.read_text().splitlines()
    train.write_text("\n".join(lines[:200]) + "\n")
    evaluation.write_text("\n".join(lines[200:240]) + "\n")
    sweep = scaffold_sweep("builtin:tiny-llama", str(train), tmp_path / "s.yaml")
    assert sweep.spec.data.eval == evaluation


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--data", "missing.jsonl"], "--data: missing.jsonl does not exist"),
        (["--model", "./no-such-model"], "--model: model directory"),
        (["--model", "not a model"], "--model: 'not a model' is neither a folder here nor a Hub id"),
        (["--model", "builtin:huge-llama"], "--model: no built-in model 'builtin:huge-llama'"),
        (["--gpu", "tpu-v5"], "--gpu: no GPU type 'tpu-v5'; valid: a10g"),
        (["--task", "ppo"], "--task: 'ppo' is not a task; valid: sft, dpo"),
        (["--data", "BROKEN"], "--data: BROKEN line 2: invalid JSON"),
        (["--data", "ALONE"], "--eval: no evaluation split beside"),
        (["--data", str(DPO_TRAIN)], "--data: "),  # preference pairs are not SFT examples
        (["--trials", "0"], "--trials: must be >= 1"),
    ],
)
def test_refused_with_one_keyed_line(tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / "broken" / "train.jsonl"
    broken.parent.mkdir()
    broken.write_text('{"prompt": "a", "completion": "b"}\n{not json\n')
    (broken.parent / "eval.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')
    alone = tmp_path / "alone.jsonl"
    alone.write_text('{"prompt": "a", "completion": "b"}\n')
    chosen = {"--model": "builtin:tiny-llama", "--data": str(SFT_TRAIN)}
    for flag, value in zip(args[::2], args[1::2]):
        chosen[flag] = {"BROKEN": str(broken), "ALONE": str(alone)}.get(value, value)
    result = init(*[item for pair in chosen.items() for item in pair], "-o", str(tmp_path / "out.yaml"))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected.split(' ')[0]}"), result.output
    assert expected.replace("BROKEN", str(broken)) in " ".join(result.output.split()), result.output
    assert not (tmp_path / "out.yaml").exists()


def test_an_existing_file_is_kept_unless_forced(tmp_path):
    out = tmp_path / "search.yaml"
    out.write_text("# mine\n")
    args = ["--model", "builtin:tiny-llama", "--data", str(SFT_TRAIN), "-o", str(out)]
    result = init(*args)
    assert result.exit_code == 2 and "--output: " in result.output and out.read_text() == "# mine\n"
    assert init(*args, "--force").exit_code == 0 and out.read_text().startswith("# Run:")


def _model_folder(where, layers, hidden=64, intermediate=176, heads=4, kv_heads=4, vocab=261):
    """A local Llama folder of the given shape for the memory forecast: the built-in model's
    tokenizer, a config.json, and an empty weights file (nothing here loads the weights)."""
    from trainables.models import resolve_model_source

    tiny = resolve_model_source("builtin:tiny-llama")
    folder = where / f"llama-{layers}x{hidden}"
    folder.mkdir(parents=True, exist_ok=True)
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny_file := Path(tiny) / file).exists():
            shutil.copy(tiny_file, folder / file)
    config = json.loads((Path(tiny) / "config.json").read_text())
    config.update(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=intermediate,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab, tie_word_embeddings=False,
                  head_dim=hidden // heads)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    return folder
