"""Model and tokenizer loading for trials: hub ids, local directories, LoRA adapter
directories, and the built-in tiny Llama. The same code path serves all four, so the
quickstart exercises what a real sweep of a hub model runs."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from filelock import FileLock

from trainables import tiny

BUILTIN_TINY_MODEL = "builtin:tiny-llama"
DEFAULT_CACHE_ROOT = Path.home() / ".cache" / "sweeper"

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_model_source(name_or_path: str, cache_root: Path = DEFAULT_CACHE_ROOT) -> str:
    """A directory or hub id that `from_pretrained` understands; builds the tiny model
    on first use (deterministic, so every node that builds it gets the same weights)."""
    if name_or_path != BUILTIN_TINY_MODEL:
        return name_or_path
    target = Path(cache_root) / f"tiny-llama-v{tiny.VERSION}"
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").is_file():
            tiny.build(target)
    return str(target)


def adapter_base(source: str) -> str | None:
    """The base model of a LoRA adapter directory, or None if `source` is not one."""
    config_file = Path(source) / "adapter_config.json"
    if not config_file.is_file():
        return None
    return json.loads(config_file.read_text())["base_model_name_or_path"]


def load_tokenizer(source: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_base_model(source: str, precision: str = "fp32"):
    """A causal LM ready for new adapters. An adapter directory is loaded on its base and
    merged, so a DPO sweep can start from an SFT result."""
    from transformers import AutoModelForCausalLM

    dtype = TORCH_DTYPES[precision] if precision == "bf16" else torch.float32
    base = adapter_base(source)
    model = AutoModelForCausalLM.from_pretrained(base or source, dtype=dtype)
    if base:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, source).merge_and_unload()
    return model


def add_lora(model, lora):
    """Wrap `model` with fresh LoRA adapters from the `lora` section of the spec."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.effective_alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
