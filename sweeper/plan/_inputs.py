"""The sweep's inputs, prepared once for the whole sweep: the model's source (a hub id or
folder resolved, the built-in model built), its tokenizer, and the train and eval data
tokenized as the task needs them. Calibration (`sweep plan`) and the launch share them.
Input errors (a model config or tokenizer that cannot load, bad data) surface here as
InputError, before anything is written or started."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.spec import SweepSpec
from trainables.errors import InputError

__all__ = ["SweepInputs", "prepare_inputs", "check_batch_fits_the_data"]


@dataclass
class SweepInputs:
    model_source: str  # what the trials load the base model from
    tokenizer: object  # saved with the sweep (promotion and export read it)
    data: dict  # split ("train", "eval") -> tokenized examples; "generation": the sample trials answer


def prepare_inputs(spec: SweepSpec, cache_root: Path) -> SweepInputs:
    from sweeper.plan._generation import generation_sample
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
    if spec.trainer == "trl" and spec.task == "dpo":
        # trl's preference trainers render the pairs themselves, from the rows as read.
        from trainables.data import read_records
        from trainables.engines import preference_rows

        data.update({f"{split}_rows": preference_rows(read_records(getattr(spec.data, split), f"data.{split}"))
                     for split in ("train", "eval")})
    sample = generation_sample(spec, tokenizer)
    if sample is not None:
        data["generation"] = sample
    check_batch_fits_the_data(spec, len(data["train"]))
    return SweepInputs(str(source), tokenizer, data)


def check_batch_fits_the_data(spec: SweepSpec, train_examples: int) -> None:
    """A micro-batch larger than the training set holds the same example several times: a
    slip (a zero too many) that would only show as a calibration or trial that never ends."""
    from sweeper.plan._calibrate import costliest_overrides

    key = "training.per_device_batch_size"
    searched = costliest_overrides(spec).get(key)
    largest = spec.training.per_device_batch_size if searched is None else searched
    if largest > train_examples:
        raise InputError(
            f"{'search.parameters.' if searched is not None else ''}{key}: {largest} examples a micro-batch, but "
            f"data.train holds {train_examples:,}; give at most {train_examples:,} (a batch would repeat examples)"
        )
