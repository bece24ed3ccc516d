"""`TrialTiming`, what the forecast reads, and the throughput model that gives one where
nothing was measured (`sweep plan --no-calibrate`, the budget check at validate time).

Training costs about 6 x parameters x tokens FLOPs (2 forward, 4 backward). LoRA saves
only the frozen weights' gradients, not the activations' gradients through them, so 6 x
all parameters is the usual estimate and errs on the safe side.

Generation is not FLOP-bound: it decodes token by token, each new token one forward of
its batch, and such a forward of a few rows costs what reading every weight once and the
layers' host work (Python, kernel launches) cost, whatever its FLOPs (`decoding_seconds`).
Two things decode: the `generation` section's pass over its sample, and GRPO (trl.method
grpo), whose every step samples its completions (rollouts) before it trains on them and
whose every evaluation samples and rewards a group of completions per eval prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sweeper.cost._architecture import architecture_of, parameter_count

__all__ = ["PEAK_TFLOPS", "UTILISATION", "MEMORY_BANDWIDTH", "DECODE_LAYER_SECONDS", "TrialTiming", "modelled_timing",
           "decoding_seconds", "RAY_TRIAL_START_SECONDS", "REUSED_TRIAL_START_SECONDS"]

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

# Memory bandwidth in bytes/s per accelerator (per core for "cpu", a typical cloud vCPU's
# share), from the same datasheets: a decoding forward reads every weight once.
MEMORY_BANDWIDTH: dict[str, float] = {
    "cpu": 10e9,
    "a10g": 600e9,
    "l40s": 864e9,
    "a100-40gb": 1555e9,
    "a100-80gb": 2039e9,
    "h100": 3350e9,
    "h200": 4800e9,
    "rtx4090": 1008e9,
}

# Host work of one decoder layer in one decoding forward of eager PyTorch (Python, kernel
# launches), whatever the batch: what bounds the decoding of a small model or batch. The
# built-in 2-layer model sampled 1.35-1.6 ms a token on one CPU core (transformers'
# generate, batches of 1 and 8; 2026-12-07).
DECODE_LAYER_SECONDS = 0.8e-3

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
    the reference model (2 x P); a GRPO step and evaluation decode their completions
    (`grpo_step_and_evaluation`)."""
    from sweeper.spec import is_grpo

    parameters = parameter_count(spec.model.name_or_path)
    if parameters is None:
        return None
    training, resources = spec.training, spec.resources
    half = training.precision in ("bf16", "fp16")
    peak = PEAK_TFLOPS.get(accelerator, PEAK_TFLOPS["a100-80gb"])[0 if half else 1] * 1e12
    utilisation = UTILISATION["gpu" if resources.use_gpu else "cpu"]
    flops_per_second = peak * utilisation * accelerators
    # Each worker decodes its own rows on its share of the accelerators.
    decoder = Decoder.of(spec, parameters, accelerator, accelerators / resources.workers_per_trial,
                         flops_per_second / resources.workers_per_trial)
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
    if is_grpo(spec):
        step, evaluation, rollouts = grpo_step_and_evaluation(spec, decoder)
        source += f"; {rollouts}"
    generation = spec.generation
    if generation is None:
        return TrialTiming(step, evaluation, setup, source)
    # Greedy decoding in batches of generation.batch_size; every worker answers the whole sample.
    prompts = min(generation.samples, evaluated)
    passes = math.ceil(prompts / generation.batch_size)
    generating = decoding_seconds(decoder, passes, min(prompts, generation.batch_size), tokens, generation.max_new_tokens)
    return TrialTiming(step, evaluation, setup, source, generating, prompts)


@dataclass(frozen=True)
class Decoder:
    """What a forward of one worker's model costs: its parameters and layers, the worker's
    FLOP/s and memory bandwidth, the bytes of its weights."""

    parameters: int
    layers: int
    flops_per_second: float
    bytes_per_second: float
    weight_bytes: float

    @classmethod
    def of(cls, spec, parameters: int, accelerator: str, accelerators: float, flops_per_second: float) -> "Decoder":
        arch = architecture_of(spec.model.name_or_path, from_hub=False)
        half = spec.training.precision in ("bf16", "fp16")
        bandwidth = MEMORY_BANDWIDTH.get(accelerator, MEMORY_BANDWIDTH["a100-80gb"]) * accelerators
        # A model known only by the size in its name: a Llama of that size has about one
        # layer per 250 M parameters (8B: 32 layers).
        layers = arch.layers if arch is not None else max(1, round(parameters / 250e6))
        return cls(parameters, layers, flops_per_second, bandwidth, parameters * (2 if half else 4))

    def forward_seconds(self, tokens: int, flops_per_token: int = 2) -> float:
        """One forward over `tokens` tokens (a batch's rows together): the longer of its FLOPs
        and reading the weights, plus the layers' host work."""
        compute = tokens * flops_per_token * self.parameters / self.flops_per_second
        return max(compute, self.weight_bytes / self.bytes_per_second) + self.layers * DECODE_LAYER_SECONDS


def decoding_seconds(decoder: Decoder, passes: float, batch: int, prompt_tokens: int, new_tokens: int) -> float:
    """Seconds of `passes` generate calls, each over `batch` prompts of `prompt_tokens`
    tokens: one forward over the prompts (prefill), then one forward of the batch per new
    token, `new_tokens` of them (the most a completion may have: none stops early).

    >>> tiny = Decoder(parameters=10**6, layers=2, flops_per_second=1e12, bytes_per_second=1e12, weight_bytes=4e6)
    >>> round(decoding_seconds(tiny, 1, 8, 100, 10) * 1000, 2)  # prefill 1.6 + 1.6 ms, 10 x (0.016 + 1.6 ms)
    19.36
    """
    return passes * (decoder.forward_seconds(batch * prompt_tokens) + new_tokens * decoder.forward_seconds(batch))


def grpo_step_and_evaluation(spec, decoder: Decoder) -> tuple[float, float, str]:
    """(step seconds, evaluation seconds, the rollouts in words) of a GRPO trial at the
    costliest config (`grpo_costliest`), on one worker (the workers run side by side).

    A step trains training.per_device_batch_size x gradient_accumulation_steps completions
    a worker (6 x P a token); trl samples them in generation batches (micro-batch x
    trl.steps_per_generation, or trl.generation_batch_size over the workers), each used for
    trl.num_iterations passes, so a step decodes 1 / num_iterations of its completions.
    Each sampled completion is scored (2 x P a token) by the reference model where
    trl.beta > 0, and by the policy before training where a batch is trained more than once
    (num_iterations > 1, or a generation batch spread over several steps). An evaluation
    samples num_generations_eval (default num_generations) completions for each eval prompt
    (data.eval_samples, GRPO_EVAL_SAMPLES where unset) in eval batches of the micro-batch,
    then scores them with the policy (and the reference). A prompt counts data.max_length
    tokens and a completion trl.max_completion_length. The reward functions are Python
    (`trl.reward_funcs`): their time is not modelled; calibration measures it."""
    from sweeper.spec import grpo_costliest, grpo_generation_batch

    grpo, training = grpo_costliest(spec), spec.training
    micro, accumulation, workers = (training.per_device_batch_size, training.gradient_accumulation_steps,
                                    spec.resources.workers_per_trial)
    prompt, completion = spec.data.max_length, grpo["max_completion_length"]
    sequence = prompt + completion
    generation_batch = grpo_generation_batch(spec, grpo, accumulation)
    trained = micro * accumulation
    sampled = trained / grpo["num_iterations"]
    reference = 1 if grpo["beta"] else 0
    old_policy = 1 if (grpo["num_iterations"] > 1 or generation_batch > trained) else 0
    scoring = (reference + old_policy) * sampled * sequence * 2 * decoder.parameters / decoder.flops_per_second
    training_flops = trained * sequence * 6 * decoder.parameters / decoder.flops_per_second
    rollouts = decoding_seconds(decoder, sampled / generation_batch, generation_batch, prompt, completion)
    step = rollouts + scoring + training_flops

    generations_eval = grpo["num_generations_eval"] or grpo["num_generations"]
    from trainables.grpo import GRPO_EVAL_SAMPLES

    prompts = _evaluated_examples(spec, unset=GRPO_EVAL_SAMPLES)
    eval_batches = math.ceil(prompts * generations_eval / (micro * workers))
    sampling = decoding_seconds(decoder, eval_batches, micro, prompt, completion)
    scored = eval_batches * micro * sequence * (1 + reference) * 2 * decoder.parameters / decoder.flops_per_second
    words = (f"GRPO: {sampled:g} completions of up to {completion} tokens sampled a step and a worker, "
             f"generation {rollouts / step:.0%} of a step, "
             f"{prompts} eval prompts x {generations_eval} at each evaluation, decoded token by token "
             f"({DECODE_LAYER_SECONDS * 1000:g} ms a layer a forward of host work)")
    return step, sampling + scored, words


def _evaluated_examples(spec, unset: int | None = None) -> int:
    """The eval rows an evaluation reads: data.eval_samples of the eval file's (all of
    them where it holds fewer; data.eval_samples where it cannot be counted), or `unset`
    of them where data.eval_samples is unset (None: all)."""
    examples, sample = _examples(spec.data.eval), spec.data.eval_samples
    sample = unset if sample is None else sample
    return examples if sample is None else min(sample, examples or sample)


def _examples(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(1 for line in file if line.strip())
    except OSError:
        return 0
