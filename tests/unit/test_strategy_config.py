"""The keys of real-size trials (quantization, attention, gradient checkpointing,
strategy and DeepSpeed settings): refused together where they cannot run, one keyed line
each, and documented in `sweep reference`."""

import json

import pytest

from sweeper.errors import UserError
from sweeper.spec._reference import markdown_reference
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from trainables.strategies import deepspeed_config


def problems(**sections) -> list[str]:
    try:
        validate_spec(small_sweep("s", **sections), base_dir=REPO)
    except UserError as error:
        return error.lines
    return []


def test_new_keys_are_in_the_reference():
    reference = markdown_reference()
    for key in ("model.quantization", "model.attn_implementation", "training.gradient_checkpointing",
                "resources.strategy", "resources.deepspeed.zero_stage", "resources.deepspeed.offload_optimizer",
                "resources.deepspeed.config"):
        assert f"| `{key}` |" in reference, key


def test_valid_combinations_pass():
    assert problems(model={"quantization": "nf4"}, training={"gradient_checkpointing": True}) == []
    assert problems(resources={"strategy": "deepspeed", "workers_per_trial": 2, "deepspeed": {"zero_stage": 3}}) == []
    assert problems(resources={"strategy": "fsdp", "workers_per_trial": 2}) == []


@pytest.mark.parametrize(
    "sections, expected",
    [
        ({"model": {"quantization": "nf4"}, "resources": {"strategy": "deepspeed"}},
         "model.quantization: nf4 cannot be combined with resources.strategy deepspeed"),
        ({"model": {"quantization": "int4"}}, "model.quantization: Input should be 'none', 'nf4' or 'int8'"),
        ({"model": {"attn_implementation": "flash_attention_2"}},
         "model.attn_implementation: flash_attention_2 runs on GPUs in bf16 or fp16"),
        ({"resources": {"strategy": "zero"}}, "resources.strategy: Input should be 'ddp', 'deepspeed' or 'fsdp'"),
        ({"resources": {"strategy": "deepspeed", "deepspeed": {"zero_stage": 4}}},
         "resources.deepspeed.zero_stage: Input should be less than or equal to 3"),
        ({"resources": {"deepspeed": {"config": "no-such.json"}}}, "resources.deepspeed.config: file"),
        ({"resources": {"use_gpu": True, "gpus_per_worker": 0.5, "workers_per_trial": 2}},
         "resources.gpus_per_worker: a fraction (0.5) with workers_per_trial 2"),
    ],
)
def test_combinations_that_cannot_run_are_one_keyed_line(sections, expected):
    lines = problems(**sections)
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_fractional_gpus_pack_one_worker_trials():
    assert problems(resources={"use_gpu": True, "gpus_per_worker": 0.25}) == []


def test_a_users_deepspeed_json_is_read_and_completed_from_training(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
        "train_micro_batch_size_per_gpu": "auto", "gradient_clipping": 0.5, "train_batch_size": "auto",
    }))
    raw = small_sweep("s", resources={"strategy": "deepspeed", "deepspeed": {"config": "ds.json"}})
    spec = validate_spec(raw, base_dir=tmp_path)
    settings = spec.resources.deepspeed
    assert (settings.effective_stage, settings.effective_offload) == (3, True)
    config = deepspeed_config(spec.trial_config())
    assert config["train_micro_batch_size_per_gpu"] == spec.training.per_device_batch_size
    assert config["gradient_clipping"] == 0.5  # the user's own value stays
    assert config["zero_optimization"]["stage"] == 3 and "train_batch_size" not in config


def test_an_adapter_folder_that_zero3_cannot_merge_at_load_is_one_keyed_line(tmp_path):
    """ZeRO-3 partitions the base as it is created: an adapter to merge into it is refused
    before launch; FSDP (its first worker merges) and ZeRO-2 take it."""
    adapter = tmp_path / "sft-adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "builtin:tiny-llama"}))
    zero3 = {"strategy": "deepspeed", "workers_per_trial": 2, "deepspeed": {"zero_stage": 3}}
    lines = problems(model={"name_or_path": str(adapter)}, resources=zero3)
    assert len(lines) == 1 and lines[0].startswith(f"model.name_or_path: {adapter} is a LoRA adapter folder"), lines
    assert "resources.strategy: fsdp" in lines[0]
    assert problems(model={"name_or_path": str(adapter)}, resources={"strategy": "fsdp", "workers_per_trial": 2}) == []
    assert problems(model={"name_or_path": str(adapter)}, resources={**zero3, "deepspeed": {"zero_stage": 2}}) == []
