"""`sweep init`'s sizes: data.max_length from the token lengths, the schedule (batch,
max_steps, eval_every) from the number of examples, and the fit on the GPU named."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import UserError
from sweeper.scaffold._arguments import GPU_TYPES, Profile

# Sequences per optimizer step: trl's example LoRA commands (trl/scripts/sft.py and dpo.py)
# train 2 a device x 8 accumulated; LoRA loses more than full fine-tuning at large batches
# (LoRA Without Regret), so the sweep stays at the small end of the usual 16-128.
BATCH = 16

# Evaluations of a full-length trial: ASHA's first rung sits at max_steps / 27 rounded up to
# an evaluation (docs/concepts/asha.md), so an evaluation every max_steps / 27 steps puts the
# screen at the first one.
EVALUATIONS = 27

MIN_STEPS_PER_EVAL = 4

# A trial of a large data set trains on a part of it: a search compares configs; the winner
# trains on everything afterwards (sweep export, then raise training.max_steps).
MAX_STEPS = 2000

MAX_LENGTH_CAP = 4096

# Tokens a CPU trial's micro-batch holds at most (host memory, not a GPU's, is the limit).
CPU_MICRO_BATCH_TOKENS = 8192


def _round_up(value: float, multiple: int) -> int:
    return max(multiple, math.ceil(value / multiple) * multiple)


def _pow2_at_most(value: int) -> int:
    return 1 << (max(1, value).bit_length() - 1)


@dataclass(frozen=True)
class Schedule:
    batch: int
    steps_per_epoch: int
    max_steps: int
    eval_every: int
    why: str  # the comment on max_steps


def schedule(examples: int) -> Schedule:
    """One epoch of BATCH-sequence steps, held within [27 x 4, MAX_STEPS] steps and made 27
    evaluations long."""
    batch = min(BATCH, _pow2_at_most(examples))
    per_epoch = math.ceil(examples / batch)
    least = EVALUATIONS * MIN_STEPS_PER_EVAL
    if per_epoch < least:
        steps = least
        why = f"One epoch is only {per_epoch} steps of {batch}: {least} steps ({least / per_epoch:.1f} epochs)"
    elif per_epoch > MAX_STEPS:
        steps = MAX_STEPS
        why = (f"One epoch is {per_epoch} steps of {batch}; each trial trains on the first {MAX_STEPS} "
               f"({MAX_STEPS / per_epoch:.0%} of the data), enough to compare configs (train the winner on all "
               "of it: sweep export, then a larger training.max_steps)")
    else:
        steps = per_epoch
        why = f"One epoch (trl's example commands train one): {examples} examples / {batch} a step = {per_epoch} steps"
    eval_every = math.ceil(steps / EVALUATIONS)
    why += (f". {EVALUATIONS} evaluations of {eval_every} steps: ASHA's first rung is the first of them "
            "(max_steps / 27, docs/concepts/asha.md).")
    return Schedule(batch, per_epoch, eval_every * EVALUATIONS, eval_every, why)


def max_lengths(profile: Profile, task: str) -> tuple[int, int | None, str]:
    """data.max_length (and dpo.max_prompt_length) from the 99th percentile, rounded up."""
    longest = max(profile.lengths)
    length = min(MAX_LENGTH_CAP, _round_up(max(profile.percentile(99), 16), 64))
    fit = sum(1 for n in profile.lengths if n <= length) / len(profile.lengths)
    fits = "every example fits whole" if fit == 1 else f"{fit:.1%} of the examples fit whole (the longest has {longest})"
    why = f"Examples are cut to this many tokens: the 99th percentile ({profile.percentile(99)}) rounded up to a multiple of 64; {fits}."
    if task != "dpo":
        return length, None, why
    prompt = _round_up(profile.percentile(99, profile.prompt_lengths), 32)
    if prompt >= length:
        length = min(MAX_LENGTH_CAP, _round_up(prompt + 64, 64))
        prompt = min(prompt, length - 32)
    return length, prompt, why


@dataclass(frozen=True)
class Fit:
    micro_batch: int
    checkpointing: bool
    quantization: str
    memory: object | None  # MemoryForecast
    why: str


def fit_on(raw: dict, base_dir: Path, gpu: str | None, batch: int) -> Fit:
    """The micro-batch, gradient checkpointing and quantization of a trial: on CPUs a
    micro-batch of at most CPU_MICRO_BATCH_TOKENS tokens; on a GPU the fastest setting the
    memory forecast fits on the card (no checkpointing with a micro-batch of 4 or more,
    else checkpointing with the largest micro-batch that fits, else nf4 with checkpointing)."""
    from sweeper.cost import forecast_trial_memory, gpu_memory_gib
    from sweeper.spec import validate_spec

    length = raw["data"]["max_length"]
    if gpu is None:
        micro = min(batch, _pow2_at_most(max(1, CPU_MICRO_BATCH_TOKENS // length)))
        return Fit(micro, False, "none", None, f"On CPUs, micro-batches of at most {CPU_MICRO_BATCH_TOKENS} tokens")
    card = gpu_memory_gib(gpu)
    sizes = [m for m in (batch, batch // 2, batch // 4, batch // 8, batch // 16) if m >= 1]

    def estimate(micro: int, checkpointing: bool, quantization: str):
        trial = {**raw, "model": {**raw["model"], "quantization": quantization},
                 "training": {**raw["training"], "per_device_batch_size": micro,
                              "gradient_checkpointing": checkpointing}}
        return forecast_trial_memory(validate_spec(trial, base_dir=base_dir))

    first = estimate(sizes[0], False, "none")
    if first is None:  # the model's config has no shape the forecast reads
        return Fit(min(batch, 4), True, "none", None,
                   "The memory forecast cannot read this model's config: a cautious micro-batch with checkpointing")
    tries = [(m, False, "none") for m in sizes if m >= min(4, batch)]
    tries += [(m, True, "none") for m in sizes] + [(m, True, "nf4") for m in sizes]
    for micro, checkpointing, quantization in tries:
        memory = estimate(micro, checkpointing, quantization)
        if memory.fits(card):
            how = {(False, "none"): "without gradient checkpointing", (True, "none"): "with gradient checkpointing",
                   (True, "nf4"): "with the base in 4-bit nf4 (QLoRA) and gradient checkpointing"}[(checkpointing, quantization)]
            why = (f"The largest micro-batch the memory forecast fits on one {gpu} ({card:g} GiB) {how}: "
                   f"about {memory.needs_gib():.1f} GiB with CUDA context and allocator slack")
            return Fit(micro, checkpointing, quantization, memory, why)
    least = estimate(1, True, "nf4")
    raise UserError(
        f"--gpu: {raw['model']['name_or_path']} does not fit a {gpu} ({card:g} GiB) even in nf4 with gradient "
        f"checkpointing and micro-batch 1 (about {least.needs_gib():.0f} GiB); name a larger card "
        f"({', '.join(g for g in GPU_TYPES if gpu_memory_gib(g) > card) or 'none larger is known'}) or shard the "
        "model over several GPUs per trial (resources.strategy: deepspeed, zero_stage 3)"
    )

