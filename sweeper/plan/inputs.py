"""The sweep's inputs, prepared once for the whole sweep: the model's source (a hub id or
folder resolved, the built-in model built), its tokenizer, and the train and eval data
tokenized as the task needs them. Calibration (`sweep plan`) and the launch share them.
Input errors (a model config or tokenizer that cannot load, bad data) surface here as
InputError, before anything is written or started."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.spec.schema import SweepSpec

__all__ = ["SweepInputs", "prepare_inputs"]


@dataclass
class SweepInputs:
    model_source: str  # what the trials load the base model from
    tokenizer: object  # saved with the sweep (promotion and export read it)
    data: dict  # split ("train", "eval") -> tokenized examples


def prepare_inputs(spec: SweepSpec, cache_root: Path) -> SweepInputs:
    from trainables.data import tokenize_split
    from trainables.models import (
        adapter_base,
        check_model_config,
        check_target_modules,
        load_tokenizer,
        resolve_model_source,
    )

    source = resolve_model_source(spec.model.name_or_path, cache_root)
    base = adapter_base(source) or source
    check_model_config(base)
    check_target_modules(base, spec.lora.target_modules)
    tokenizer = load_tokenizer(base)
    trial = spec.trial_config()
    data = {split: tokenize_split(trial, split, tokenizer) for split in ("train", "eval")}
    return SweepInputs(str(source), tokenizer, data)
