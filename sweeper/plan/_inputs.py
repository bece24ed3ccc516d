"""The sweep's inputs, prepared once for the whole sweep: the model's source (a hub id or
folder resolved, the built-in model built), its tokenizer, the train and eval data
tokenized as the task needs them (the eval split cut to its sample where
data.eval_samples says), and the generation sample every trial answers.
Calibration and the launch share them. Input errors (a model config or tokenizer that
cannot load, bad data, a scorer that does not import) surface here, before anything is
written or started."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import UserError
from sweeper.plan._sweep_plan import generation_steps
from sweeper.spec import SweepSpec
from trainables.errors import InputError
from trainables.task_metrics import GenerationSample, build_sample, is_generation_metric, scorer_metric_names

__all__ = ["SweepInputs", "prepare_inputs", "check_batch_fits_the_data", "generation_sample"]


@dataclass
class SweepInputs:
    model_source: str  # what the trials load the base model from
    tokenizer: object  # saved with the sweep (promotion and export read it)
    data: dict  # split ("train", "eval") -> tokenized examples; "generation": the sample trials answer


def prepare_inputs(spec: SweepSpec, cache_root: Path) -> SweepInputs:
    from trainables.data import eval_sample_rows, tokenize_split
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
    rows = eval_sample_rows(spec.data.eval_samples, len(data["eval"]))
    if rows is not None:  # data.eval_samples: the same rows for every trial and evaluation
        data["eval"] = data["eval"].rows(rows)
        if "eval_rows" in data:
            data["eval_rows"] = [data["eval_rows"][i] for i in rows]
    if spec.trainer == "trl" and spec.trl.method == "grpo":
        data.update(grpo_prompts(spec))
    sample = generation_sample(spec, tokenizer, within=rows)
    if sample is not None:
        data["generation"] = sample
    check_batch_fits_the_data(spec, len(data["train"]))
    return SweepInputs(str(source), tokenizer, data)


def grpo_prompts(spec: SweepSpec) -> dict:
    """GRPO's rows (prompt, reference): every row of data.train, and the eval sample
    (data.eval_samples rows of data.eval, GRPO_EVAL_SAMPLES where it is unset) that every
    trial's evaluations reward."""
    from trainables.data import eval_sample_rows, read_records
    from trainables.grpo import GRPO_EVAL_SAMPLES, grpo_rows

    train = grpo_rows(read_records(spec.data.train, "data.train"), "data.train")
    evaluated = grpo_rows(read_records(spec.data.eval, "data.eval"), "data.eval")
    chosen = eval_sample_rows(spec.data.eval_samples or GRPO_EVAL_SAMPLES, len(evaluated))
    return {"train_rows": train, "eval_rows": [evaluated[i] for i in chosen]}


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


def generation_sample(spec: SweepSpec, tokenizer, within: list[int] | None = None) -> GenerationSample | None:
    """What every trial answers and when (`generation.when`: every evaluation, the plan's
    rungs and max_steps, or max_steps only), drawn from the eval rows `within` (the eval
    sample; None: the whole split); None without a generation section. A user
    scorer is called once here, on the references as answers, so that one that does not
    import or returns no number, and a search.metric it does not report, stop the sweep
    before any trial starts."""
    generation = spec.generation
    if generation is None:
        return None
    if "chrf" in generation.scores and importlib.util.find_spec("sacrebleu") is None:
        raise UserError("generation.scores: chrf is sacrebleu's; pip install 'sacrebleu>=2.6', or leave chrf out")
    sample = build_sample(generation, spec.data.eval, tokenizer, spec.data.max_length, generation_steps(spec), within)
    reported = scorer_metric_names(generation, sample.references, sample.rows)
    for key, metric in (("search.metric", spec.search.metric), ("early_stopping.metric", spec.early_stopping.metric)):
        if metric is not None and is_generation_metric(metric) and metric not in reported:
            raise UserError(f"{key}: {metric!r} is not reported by the generation section; it reports {', '.join(reported)}")
    return sample
