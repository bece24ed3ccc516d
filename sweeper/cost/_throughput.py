"""`TrialTiming`, what the forecast reads, and the throughput model that gives one where
nothing was measured (`sweep plan --no-calibrate`, the budget check at validate time).

Training costs about 6 x parameters x tokens FLOPs (2 forward, 4 backward). LoRA saves
only the frozen weights' gradients, not the activations' gradients through them, so 6 x
all parameters is the usual estimate and errs on the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.cost._architecture import parameter_count

__all__ = ["PEAK_TFLOPS", "UTILISATION", "TrialTiming", "modelled_timing", "RAY_TRIAL_START_SECONDS",
           "REUSED_TRIAL_START_SECONDS"]

# Dense peak TFLOP/s per accelerator (per core for "cpu"): (bf16/fp16 tensor cores, fp32
# without TF32), from the vendors' datasheets (sparsity figures halved); "cpu" is a typical
# cloud vCPU. Keys match the price table (sweeper/cost/_prices.py).
PEAK_TFLOPS: dict[str, tuple[float, float]] = {
    "cpu": (0.1, 0.1),
    "a10g": (125.0, 31.2),
    "l40s": (362.0, 91.6),
    "a100-40gb": (312.0, 19.5),
    "a100-80gb": (312.0, 19.5),
    "h100": (989.0, 67.0),
    "h200": (989.0, 67.0),
    "rtx4090": (165.0, 82.6),
}

# Share of the peak a LoRA fine-tuning step reaches (model FLOPs utilisation): on GPUs the
# middle of what PyTorch LLM trainers report for dense models of 1-10 B parameters.
UTILISATION: dict[str, float] = {"cpu": 0.3, "gpu": 0.35}

# A modelled trial start: Ray Train's worker and placement group, then the model read at
# MODEL_LOAD_BYTES_PER_SECOND.
TRIAL_START_SECONDS = 3.0
MODEL_LOAD_BYTES_PER_SECOND = 1e9

# What Ray adds to a trial around the loop's own setup, added to a calibrated setup: for
# a Train run of several workers, its placement group, worker group and end; for a
# one-worker trial in the process Tune reuses, Tune's reset of that process and its
# placement, which the loop's own setup does not see.
RAY_TRIAL_START_SECONDS = 1.5
REUSED_TRIAL_START_SECONDS = 0.8


@dataclass(frozen=True)
class TrialTiming:
    """How long one trial's parts take on the target hardware (all its workers together)."""

    step_seconds: float  # one optimizer step
    eval_seconds: float  # one evaluation, with its report and adapter checkpoint
    setup_seconds: float  # one Train run's start (a trial's start, each resume after a rung)
    source: str  # where the figures come from, in words
    # One pass of generation over the sweep's sample (`generation`; 0 without one).
    generation_seconds: float = 0.0
    generation_prompts: int = 0  # the sample's prompts
    # What a new trial process pays once before its first trial's start (importing torch,
    # transformers, peft): one per slot where Tune reuses trial processes (one-worker
    # trials); 0 where every start is a new process (it is in setup_seconds then).
    process_start_seconds: float = 0.0


def modelled_timing(spec, accelerator: str, accelerators: float) -> TrialTiming | None:
    """Step, evaluation, start and generation seconds from the throughput model; None when the
    model's size is unknown. An example counts data.max_length tokens (an upper bound); a
    DPO example is a chosen and a rejected sequence, each trained (6 x P) and scored by
    the reference model (2 x P)."""
    parameters = parameter_count(spec.model.name_or_path)
    if parameters is None:
        return None
    training, resources = spec.training, spec.resources
    half = training.precision in ("bf16", "fp16")
    peak = PEAK_TFLOPS.get(accelerator, PEAK_TFLOPS["a100-80gb"])[0 if half else 1] * 1e12
    utilisation = UTILISATION["gpu" if resources.use_gpu else "cpu"]
    flops_per_second = peak * utilisation * accelerators
    tokens = spec.data.max_length
    train_flops, eval_flops = 6 * parameters * tokens, 2 * parameters * tokens
    if spec.task == "dpo":
        train_flops, eval_flops = 2 * (6 + 2) * parameters * tokens, 2 * (2 + 2) * parameters * tokens
    examples = training.per_device_batch_size * training.gradient_accumulation_steps * resources.workers_per_trial
    step = examples * train_flops / flops_per_second
    evaluated = _evaluated_examples(spec)
    evaluation = evaluated * eval_flops / flops_per_second
    setup = TRIAL_START_SECONDS + parameters * (2 if half else 4) / MODEL_LOAD_BYTES_PER_SECOND
    source = (
        f"throughput model: 6 x {parameters:,} parameters x {tokens} tokens per example at "
        f"{utilisation:.0%} of {peak / 1e12:g} TFLOP/s ({accelerator}) x {accelerators:g}"
    )
    generation = spec.generation
    if generation is None:
        return TrialTiming(step, evaluation, setup, source)
    # Greedy decoding: each new token a forward pass (2 x P) of its sequence; every worker
    # answers the whole sample, on its own share of the accelerators.
    prompts = min(generation.samples, evaluated)
    generating = prompts * generation.max_new_tokens * 2 * parameters * resources.workers_per_trial / flops_per_second
    return TrialTiming(step, evaluation, setup, source, generating, prompts)


def _evaluated_examples(spec) -> int:
    """The eval rows an evaluation reads: data.eval_samples of the eval file's (all of
    them where it holds fewer; data.eval_samples where it cannot be counted), or all."""
    examples, sample = _examples(spec.data.eval), spec.data.eval_samples
    return examples if sample is None else min(sample, examples or sample)


def _examples(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(1 for line in file if line.strip())
    except OSError:
        return 0
