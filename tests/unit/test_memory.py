"""The memory forecast (sweeper/cost/_memory.py): the arithmetic behaves as the memory of a
fine-tune does, the shipped GPU sweeps fit the cards they name, and a trial that fits no
GPU is refused with one keyed line that names what would fit."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeper.cost._architecture import KNOWN_CONFIGS, Architecture, architecture_of
from sweeper.cost._memory import forecast, forecast_trial_memory, gpu_memory_gib, refuse_if_unfit
from sweeper.errors import UserError
from sweeper.spec._load import load_spec, validate_spec
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


def test_a_searched_micro_batch_and_checkpointing_are_forecast_at_their_largest(tmp_path):
    raw = gpu_sweep(tmp_path)
    raw["search"]["parameters"]["training.per_device_batch_size"] = {"distribution": "categorical", "values": [2, 8]}
    raw["search"]["parameters"]["training.gradient_checkpointing"] = {"distribution": "categorical", "values": [True, False]}
    spec = validate_spec(raw, base_dir=REPO)
    estimate = forecast_trial_memory(spec)
    assert "LoRA r=64, micro-batch 8 x 2048 without gradient checkpointing" in estimate.describe()
    fixed = forecast_trial_memory(validate_spec(gpu_sweep(tmp_path), base_dir=REPO))
    assert estimate.total > 4 * fixed.total


# The GPU check's table of record on an H100 80GB (benchmarks/README.md): the trial's own step,
# LoRA r 16 on every projection with dropout 0.05, sequence 1024, and its peak max_memory_allocated.
H100_TABLE = [
    ("sft_1b", "meta-llama/Llama-3.2-1B", {"micro_batch": 16, "checkpointing": False}, 59.49),
    ("sft_1b_checkpointing", "meta-llama/Llama-3.2-1B", {"micro_batch": 32, "checkpointing": True}, 51.71),
    ("sft_8b_checkpointing", "meta-llama/Llama-3.1-8B", {"micro_batch": 16, "checkpointing": True}, 43.22),
    ("dpo_1b", "meta-llama/Llama-3.2-1B", {"micro_batch": 4, "checkpointing": False, "task": "dpo"}, 34.90),
    ("qlora_8b", "meta-llama/Llama-3.1-8B", {"micro_batch": 8, "checkpointing": True, "quantization": "nf4"}, 24.65),
]
ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.mark.parametrize("name, model, settings, measured_gib", H100_TABLE, ids=[line[0] for line in H100_TABLE])
def test_the_forecast_matches_the_peaks_measured_on_an_h100(name, model, settings, measured_gib):
    check = {**BASE, "target_modules": ALL_PROJECTIONS, "lora_dropout": 0.05, "sequence": 1024, **settings}
    estimate = forecast(architecture_of(model), **check)
    assert estimate.gib == pytest.approx(measured_gib, rel=0.02), estimate.describe()


def test_the_loss_and_a_layers_recomputation_are_counted_as_the_larger_not_the_sum():
    checkpointed = forecast(LLAMA_8B, **{**BASE, "checkpointing": True})
    assert checkpointed.total == checkpointed.weights + checkpointed.adapter + checkpointed.activations + max(
        checkpointed.logits, checkpointed.recomputed)
    assert 0 < checkpointed.recomputed < checkpointed.logits  # a 128k vocabulary: the loss is the peak
    # A small vocabulary: the recomputed layer is the peak, and the logits do not add to it.
    small_vocab = Architecture(**{**LLAMA_8B.__dict__, "vocab": 1000})
    small = forecast(small_vocab, **{**BASE, "checkpointing": True})
    assert small.recomputed > small.logits
    assert small.total == pytest.approx(small.weights + small.adapter + small.activations + small.recomputed)
    # Without checkpointing every layer's activations wait for the loss: both count.
    plain = forecast(LLAMA_8B, **BASE)
    assert plain.recomputed == 0 and plain.total == plain.weights + plain.adapter + plain.activations + plain.logits


def test_bytes_per_logit_follow_the_task_and_qlora_keeps_an_fp32_residual_and_a_bf16_head():
    tokens = BASE["micro_batch"] * BASE["sequence"]
    sft = forecast(LLAMA_8B, **BASE)
    dpo = forecast(LLAMA_8B, **{**BASE, "task": "dpo"})
    assert sft.logits == tokens * LLAMA_8B.vocab * 12
    assert dpo.logits == 2 * tokens * LLAMA_8B.vocab * 16  # chosen and rejected rows
    bf16 = forecast(LLAMA_8B, **{**BASE, "checkpointing": True})
    nf4 = forecast(LLAMA_8B, **{**BASE, "checkpointing": True, "quantization": "nf4"})
    assert bf16.activations == tokens * LLAMA_8B.layers * LLAMA_8B.hidden * 2
    assert nf4.activations == tokens * LLAMA_8B.layers * LLAMA_8B.hidden * 4
    assert nf4.logits - bf16.logits == LLAMA_8B.vocab * LLAMA_8B.hidden * 2


def test_cards_are_sized_by_what_a_process_can_allocate():
    assert gpu_memory_gib("a10g") == gpu_memory_gib("l4") == pytest.approx(22.25, abs=0.5)
    assert gpu_memory_gib("l40s") == pytest.approx(45, abs=0.6)
    assert gpu_memory_gib("h100") == pytest.approx(79.2)  # what torch reported on the GPU check's H100 80GB
    assert all(size < marketed for size, marketed in [(gpu_memory_gib("rtx4090"), 24), (gpu_memory_gib("a100-80gb"), 80),
                                                      (gpu_memory_gib("a100-40gb"), 40), (gpu_memory_gib("h200"), 141)])


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


# ---------------------------------------------------------------- resources.gpus_per_worker: auto


def packed_sweep(tmp_path, **sections) -> dict:
    """The 8B sweep with gpus_per_worker: auto (its own settings: LoRA r 64, micro-batch 4 x 2048, checkpointing)."""
    resources = {"use_gpu": True, "gpus_per_worker": "auto", "workers_per_trial": 1, **sections.pop("resources", {})}
    return gpu_sweep(tmp_path, resources=resources, **sections)


def test_auto_packs_the_most_trials_that_leave_a_sixth_of_the_gpu_free(tmp_path):
    from sweeper.cost._memory import PACKING_MARGIN, gpu_packing, with_gpu_packing

    spec = validate_spec(packed_sweep(tmp_path), base_dir=REPO)
    needs = forecast_trial_memory(spec).needs_gib()
    for card in (24 / (1 - PACKING_MARGIN) + 1, 80, 141):
        if needs > card * (1 - PACKING_MARGIN):
            continue
        packing = gpu_packing(spec, card)
        n = packing.trials_per_gpu
        assert n * needs <= card * (1 - PACKING_MARGIN) < (n + 1) * needs, (card, n, needs)
    packed, packing = with_gpu_packing(spec, 141)
    assert packed.resources.gpus_per_worker == pytest.approx(1 / packing.trials_per_gpu)
    assert packed.trial_config().resources.gpus_per_worker == packed.resources.gpus_per_worker
    assert re.match(r"GPU packing \(resources.gpus_per_worker: auto\): \d+ trial\(s\) per 141 GiB GPU", packing.describe())
    # A number is left as it is.
    numbered = validate_spec(gpu_sweep(tmp_path), base_dir=REPO)
    assert with_gpu_packing(numbered, 80) == (numbered, None)


def test_auto_packs_a_small_model_many_times_but_at_most_sixteen(tmp_path):
    from sweeper.cost._memory import MOST_TRIALS_PER_GPU, forecast, gpu_packing

    spec = validate_spec(packed_sweep(tmp_path, model={"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"},
                                      training={"per_device_batch_size": 1}, data={"max_length": 512}), base_dir=REPO)
    assert gpu_packing(spec, 141).trials_per_gpu == MOST_TRIALS_PER_GPU
    forecast_1b = forecast(architecture_of("meta-llama/Llama-3.2-1B"), **{**BASE, "micro_batch": 1, "sequence": 512})
    assert forecast_1b.needs_gib() * 4 <= 80 * 0.85  # the GPU check's packing case: four 1B trials fit an 80 GB card


def test_auto_where_one_trial_does_not_fit_is_one_keyed_line_naming_the_fix(tmp_path):
    from sweeper.cost._memory import gpu_packing

    spec = validate_spec(packed_sweep(tmp_path, training={"gradient_checkpointing": False}), base_dir=REPO)
    with pytest.raises(UserError) as error:
        gpu_packing(spec, 24)
    (line,) = error.value.lines
    assert re.match(
        r"resources.gpus_per_worker: auto: one trial needs about \d+ GiB \(8\.0B in bf16, LoRA r=64, micro-batch 4 x "
        r"2048 without gradient checkpointing\), more than the 20 GiB that a 24 GiB GPU leaves with 15% free; set .*nf4",
        line,
    ), line
    with pytest.raises(UserError, match=r"^resources.gpus_per_worker: auto needs the GPU's memory"):
        gpu_packing(spec, None)


def test_auto_is_refused_at_validate_on_the_named_card_and_for_several_workers(tmp_path):
    from sweeper.plan._checks import check_spec

    fits = validate_spec(packed_sweep(tmp_path, cost={"accelerator": "h100"}), base_dir=REPO)
    check_spec(fits)  # does not raise: sized on the h100 here, on the cluster's GPU at start
    unfit = validate_spec(packed_sweep(tmp_path, cost={"accelerator": "a10g"}), base_dir=REPO)
    with pytest.raises(UserError) as error:
        check_spec(unfit)
    assert [line.split(":")[0] for line in error.value.lines] == ["resources.gpus_per_worker"]
    with pytest.raises(UserError, match=r"resources.gpus_per_worker: auto packs one-worker trials on a GPU, but "
                                        r"workers_per_trial is 2; set gpus_per_worker: 1, or workers_per_trial: 1"):
        from sweeper.spec._load import validate_spec as validate

        validate(packed_sweep(tmp_path, resources={"workers_per_trial": 2}), base_dir=REPO)
