"""The throughput model: a trial's step, evaluation and start seconds where nothing was
measured (`sweep plan --no-calibrate`, the budget check at validate time), and the
`TrialTiming` that calibration measures and the forecast reads.

Training costs about 6 x parameters x tokens FLOPs (2 for the forward pass, 4 for the
backward). LoRA does not make this much smaller: the backward pass still computes the
activations' gradients through every frozen weight (about 2x forward); only the weight
gradients (about 1x forward) are skipped for frozen weights, so 6 x all parameters is
the usual estimate and errs on the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.cost._architecture import parameter_count

__all__ = ["PEAK_TFLOPS", "UTILISATION", "TrialTiming", "modelled_timing", "RAY_TRIAL_START_SECONDS"]

# Dense peak TFLOP/s per accelerator (per core for "cpu"): (bf16/fp16 tensor cores, fp32
# without TF32). GPUs: the vendors' datasheets (NVIDIA A10, L40S, A100, H100 SXM, H200 SXM,
# Ada/RTX 4090 whitepaper; sparsity figures halved). CPU: one core with AVX-512, two FMA
# units at about 3 GHz is 192 GFLOP/s fp32 peak; 0.1 is the figure for a typical cloud
# vCPU (AVX2, shared core). Keys match the price table (sweeper/cost/_prices.py); a100-40gb and
# a100-80gb share the A100's figures.
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


# Share of the peak a LoRA fine-tuning step reaches (model FLOPs utilisation). 0.35 on GPUs
# is the middle of the 30-45% that PyTorch LLM trainers report for dense models of 1-10 B
# parameters; small models and batches reach less. 0.3 on CPU is an assumption.
UTILISATION: dict[str, float] = {"cpu": 0.3, "gpu": 0.35}


# A trial start without calibration: Ray Train's worker group and placement group plus
# the model read at MODEL_LOAD_BYTES_PER_SECOND.
TRIAL_START_SECONDS = 3.0
MODEL_LOAD_BYTES_PER_SECOND = 1e9

# What Ray adds to each Train run around the training loop's own setup (placement group,
# worker group, the run's end and the slot passing to the next run): added to a calibrated
# loop setup; the live forecast replaces it by the sweep's own starts.
RAY_TRIAL_START_SECONDS = 1.5


@dataclass(frozen=True)
class TrialTiming:
    """How long one trial's parts take on the target hardware (all its workers together)."""

    step_seconds: float  # one optimizer step
    eval_seconds: float  # one evaluation, with its report and adapter checkpoint
    setup_seconds: float  # one Train run's start (a trial's start, each resume after a rung)
    source: str  # where the figures come from, in words


def _examples(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(1 for line in file if line.strip())
    except OSError:
        return 0


def modelled_timing(spec, accelerator: str, accelerators: float) -> TrialTiming | None:
    """Step, evaluation and start seconds from the throughput model; None when the
    model's size is unknown. Tokens per example are taken as data.max_length (an upper
    bound: examples are truncated to it); a DPO example is a chosen and a rejected
    sequence, each trained (6 x P) and scored by the reference (2 x P)."""
    parameters = parameter_count(spec.model.name_or_path)
    if parameters is None:
        return None
    training, resources = spec.training, spec.resources
    bf16, fp32 = PEAK_TFLOPS.get(accelerator, PEAK_TFLOPS["a100-80gb"])
    peak = (bf16 if training.precision in ("bf16", "fp16") else fp32) * 1e12
    utilisation = UTILISATION["gpu" if resources.use_gpu else "cpu"]
    flops_per_second = peak * utilisation * accelerators
    tokens = spec.data.max_length
    train_flops_per_example, eval_flops_per_example = 6 * parameters * tokens, 2 * parameters * tokens
    if spec.task == "dpo":
        train_flops_per_example, eval_flops_per_example = 2 * (6 + 2) * parameters * tokens, 2 * (2 + 2) * parameters * tokens
    examples_per_step = training.per_device_batch_size * training.gradient_accumulation_steps * resources.workers_per_trial
    step = examples_per_step * train_flops_per_example / flops_per_second
    evaluation = _examples(spec.data.eval) * eval_flops_per_example / flops_per_second
    bytes_per_parameter = 2 if training.precision in ("bf16", "fp16") else 4
    setup = TRIAL_START_SECONDS + parameters * bytes_per_parameter / MODEL_LOAD_BYTES_PER_SECOND
    source = (
        f"throughput model: 6 x {parameters:,} parameters x {tokens} tokens per example at "
        f"{utilisation:.0%} of {peak / 1e12:g} TFLOP/s ({accelerator}) x {accelerators:g}"
    )
    return TrialTiming(step, evaluation, setup, source)

