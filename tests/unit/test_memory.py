"""The memory forecast (sweeper/cost/memory.py): the arithmetic behaves as the memory of a
fine-tune does, the shipped GPU sweeps fit the cards they name, and a trial that fits no
GPU is refused with one keyed line that names what would fit."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeper.cost.architecture import KNOWN_CONFIGS, Architecture, architecture_of
from sweeper.cost.memory import forecast, forecast_trial_memory, gpu_memory_gib, refuse_if_unfit
from sweeper.errors import UserError
from sweeper.spec.load import load_spec, validate_spec
from tests.conftest import REPO, small_sweep

GPU_SWEEPS = sorted(
    p for p in (REPO / "search_spaces").glob("*.yaml")
    if (yaml.safe_load(p.read_text()).get("resources") or {}).get("use_gpu")
)
LLAMA_8B = architecture_of("meta-llama/Llama-3.1-8B-Instruct")

BASE = dict(
    precision="bf16", quantization="none", lora_r=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    lora_dropout=0.0, micro_batch=4, sequence=2048, checkpointing=False, strategy="ddp", zero_stage=2,
    offload_optimizer=False, workers=1,
)


def test_parameter_counts_match_the_published_sizes():
    assert LLAMA_8B.params == pytest.approx(8.03e9, rel=0.01)
    assert architecture_of("Qwen/Qwen2.5-0.5B-Instruct").params == pytest.approx(0.494e9, rel=0.01)
    assert architecture_of("meta-llama/Llama-3.1-70B").params == pytest.approx(70.6e9, rel=0.01)


def test_the_built_in_model_is_forecast_from_its_real_config():
    from safetensors import safe_open

    from trainables.models import BUILTIN_TINY_MODEL, resolve_model_source

    folder = Path(resolve_model_source(BUILTIN_TINY_MODEL))
    assert architecture_of(str(folder)) == Architecture.from_config(KNOWN_CONFIGS[BUILTIN_TINY_MODEL])
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        count = sum(_numel(weights.get_slice(name).get_shape()) for name in weights.keys())
    assert architecture_of(str(folder)).params == count


def _numel(shape) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def test_each_memory_option_lowers_its_own_part():
    plain = forecast(LLAMA_8B, **BASE)
    checkpointed = forecast(LLAMA_8B, **{**BASE, "checkpointing": True})
    nf4 = forecast(LLAMA_8B, **{**BASE, "quantization": "nf4"})
    zero3 = forecast(LLAMA_8B, **{**BASE, "strategy": "deepspeed", "zero_stage": 3, "workers": 4})
    zero2 = forecast(LLAMA_8B, **{**BASE, "strategy": "deepspeed", "zero_stage": 2, "workers": 4})
    offloaded = forecast(LLAMA_8B, **{**BASE, "strategy": "deepspeed", "zero_stage": 2, "workers": 4, "offload_optimizer": True})
    assert plain.weights / 2**30 == pytest.approx(15.0, rel=0.02)  # 8B in bf16
    assert checkpointed.activations < plain.activations / 10
    assert checkpointed.weights == plain.weights and checkpointed.logits == plain.logits
    # nf4: the 7B of linear weights at about half a byte; embeddings and head stay (fp32).
    assert 5.5 < nf4.weights / 2**30 < 8.5
    assert zero3.weights == pytest.approx(plain.weights / 4)
    assert zero2.weights == plain.weights and zero2.adapter < plain.adapter
    assert offloaded.adapter < zero2.adapter
    # The activations of 4 x 2048 tokens without checkpointing dwarf an 80 GB card's room.
    assert plain.gib > 60


def test_searched_rank_is_forecast_at_its_largest():
    spec = load_spec(REPO / "search_spaces" / "llama3.1-8b-lora-sft.yaml")
    assert "LoRA r=64" in forecast_trial_memory(spec).describe()


@pytest.mark.parametrize("path", GPU_SWEEPS, ids=lambda p: p.name)
def test_shipped_gpu_sweeps_fit_the_cards_they_name(path):
    spec = load_spec(path)
    card = spec.cost.accelerator
    assert card is not None, f"{path.name} names no card (cost.accelerator)"
    estimate = forecast_trial_memory(spec)
    assert estimate is not None
    assert estimate.fits(gpu_memory_gib(card)), estimate.describe()
    comment = " ".join(line for line in path.read_text().splitlines() if line.startswith("#")).lower()
    assert card.split("-")[0] in comment.replace(" ", "-"), f"{path.name}: its comment does not name {card}"
    refuse_if_unfit(spec, gpu_memory_gib(card))  # does not raise


def gpu_sweep(tmp_path, **sections) -> dict:
    raw = yaml.safe_load((REPO / "search_spaces" / "llama3.1-8b-lora-sft.yaml").read_text())
    raw["data"] = {**small_sweep("x")["data"], "max_length": 2048}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return raw


def test_a_trial_that_fits_no_gpu_is_refused_with_a_keyed_line_naming_the_fix(tmp_path):
    raw = gpu_sweep(tmp_path, training={"gradient_checkpointing": False}, cost={"accelerator": "a10g"})
    spec = validate_spec(raw, base_dir=REPO)
    with pytest.raises(UserError) as error:
        refuse_if_unfit(spec, 24)
    (line,) = error.value.lines
    assert re.match(
        r"resources: a trial needs about \d+ GiB per GPU \(8\.0B in bf16, LoRA r=64, micro-batch 4 x 2048 "
        r"without gradient checkpointing\); the largest GPU has 24 GiB; set .*nf4", line
    ), line
    # On 80 GB cards checkpointing alone is the fix.
    with pytest.raises(UserError, match=r"has 80 GiB; set training.gradient_checkpointing: true \(about \d+ GiB\)"):
        refuse_if_unfit(spec, 80)


def test_validate_prints_the_forecast_and_refuses_an_unfit_sweep(tmp_path):
    fits = tmp_path / "fits.yaml"
    fits.write_text(yaml.safe_dump(gpu_sweep(tmp_path)))
    unfit = tmp_path / "unfit.yaml"
    unfit.write_text(yaml.safe_dump(gpu_sweep(tmp_path, cost={"accelerator": "a10g"})))
    env_cmd = [sys.executable, "-m", "sweeper.cli", "validate"]
    ok = subprocess.run([*env_cmd, str(fits)], capture_output=True, text=True, env={"COLUMNS": "300", **_env()})
    assert ok.returncode == 0, ok.stderr
    assert re.search(r"Memory: about \d+\.\d GiB per GPU \(8\.0B in bf16", ok.stdout), ok.stdout
    refused = subprocess.run([*env_cmd, str(unfit)], capture_output=True, text=True, env={"COLUMNS": "300", **_env()})
    assert refused.returncode == 2
    assert "error: resources: a trial needs about" in refused.stderr and "Traceback" not in refused.stderr


def _env() -> dict:
    import os

    return dict(os.environ)
