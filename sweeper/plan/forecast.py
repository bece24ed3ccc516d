"""Forecast: what a sweep will cost before it starts. Pure: a plan (its rung ladder,
slots and per-trial resources) and a trial timing (seconds per optimizer step, per
evaluation and per trial start) become expected and worst-case wall time,
accelerator-hours and dollars.

- Expected: what the ASHA ladder trains. For `asha` (ASHA by promotion) the ladder is
  known before launch (`SweepPlan.trials_per_milestone`); each segment between rungs is
  a Train run of its own (a promoted trial resumes from its checkpoint), so it pays one
  trial start, except for the startup trials (`early_stopping.startup_trials`), which
  train to max_steps in one run. For `asha_stopping` (Ray's ASHA) the same ladder is
  assumed, with one start per trial. `median` and `none` are assumed to prune nothing: expected = worst case.
- Worst case: every trial trains to `training.max_steps`.
- Wall time: the trials of each segment run in waves of `slots` trials, and the segments
  follow each other (the promoted trials of a rung wait for its ranking); between two
  trials a slot stands idle for a turnaround (the stopped trial's Train run is torn down,
  Tune's loop starts the next one on the reused actor).
- Without calibration, a throughput model gives the step time: training costs about
  6 x parameters x tokens FLOPs (2 for the forward pass, 4 for the backward). LoRA does
  not make this much smaller: the backward pass still computes the activations'
  gradients through every frozen weight (about 2x forward); only the weight gradients
  (about 1x forward) are skipped for frozen weights, so 6 x all parameters is the usual
  estimate and errs on the safe side.
"""

from __future__ import annotations

import json
import re
import math
from dataclasses import dataclass, field
from pathlib import Path

from sweeper.cost.prices import price_per_hour
from sweeper.plan.sweep_plan import SweepPlan, rung_quota

__all__ = [
    "PEAK_TFLOPS",
    "UTILISATION",
    "TrialTiming",
    "Scenario",
    "Forecast",
    "forecast_sweep",
    "modelled_timing",
    "model_parameters",
    "first_trial_cost",
    "forecast_lines",
]

# Dense peak TFLOP/s per accelerator (per core for "cpu"): (bf16/fp16 tensor cores, fp32
# without TF32). GPUs: the vendors' datasheets (NVIDIA A10, L40S, A100, H100 SXM, H200 SXM,
# Ada/RTX 4090 whitepaper; sparsity figures halved). CPU: one core with AVX-512, two FMA
# units at about 3 GHz is 192 GFLOP/s fp32 peak; 0.1 is the figure for a typical cloud
# vCPU (AVX2, shared core). Keys match the price table (sweeper/cost/prices.py); a100-40gb and
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

# A trial start without calibration: Ray Train's worker group and placement group (1-3 s on
# the 2-core machine, benchmarks/README.md) plus the model read at this rate.
TRIAL_START_SECONDS = 3.0
MODEL_LOAD_BYTES_PER_SECOND = 1e9
# Ray's share of a trial around the training loop, measured on the 2-core machine with the
# three forecast benchmarks (benchmarks/README.md, "Forecast against actual"): what a trial
# start adds to the loop's own setup (worker group, placement group), the time from a
# trial's last report until Tune has ended it (counted in its cost), and the time a slot
# stands idle between two trials (not counted in any trial's cost).
RAY_TRIAL_START_SECONDS = 1.0
TRIAL_STOP_SECONDS = 0.3
SLOT_TURNAROUND_SECONDS = 0.5
# The first trial on each slot starts its trial actor and Train worker processes cold
# (the first two quickstart trials' setup: 2.2-3.0 s, the later ones' 0.8-1.8 s).
COLD_START_SECONDS = 1.2

# trainables/tiny.py's config: vocabulary 261 (256 bytes + 5 special tokens), hidden 64,
# MLP 176, 2 layers, untied head; used when it is not built yet.
TINY_LLAMA_CONFIG = {
    "vocab_size": 261,
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}


@dataclass(frozen=True)
class TrialTiming:
    """How long one trial's parts take on the target hardware (all its workers together)."""

    step_seconds: float  # one optimizer step
    eval_seconds: float  # one evaluation, with its report and adapter checkpoint
    setup_seconds: float  # one trial start (also each resume after a pause at a rung)
    source: str  # where the figures come from, in words
    stop_seconds: float = TRIAL_STOP_SECONDS  # last report to the trial's end (costed)
    turnaround_seconds: float = SLOT_TURNAROUND_SECONDS  # a slot idle between two trials
    cold_start_seconds: float = COLD_START_SECONDS  # extra for the first trial on each slot


@dataclass(frozen=True)
class Scenario:
    steps: int  # training steps over all trials
    trial_seconds: float  # sum of the trials' wall times (what the cost counts)
    wall_seconds: float  # the sweep's wall time with the cluster's slots
    accelerator_hours: float
    usd: float


@dataclass(frozen=True)
class Forecast:
    timing: TrialTiming
    expected: Scenario
    worst: Scenario
    ladder: list[tuple[int, int]]  # (step, trials that train to it), expected case
    assumption: str  # what the expected case assumes about early stopping
    slots: int
    accelerators_per_trial: float
    accelerator: str
    usd_per_hour: float
    costliest: TrialTiming | None = None  # the dearest config's timing (worst case)
    notes: list[str] = field(default_factory=list)

    def as_params(self) -> dict[str, str]:
        """The forecast as MLflow params of the parent run (`forecast_*`)."""
        t, e, w = self.timing, self.expected, self.worst
        return {
            "forecast_step_seconds": f"{t.step_seconds:.6g}",
            "forecast_eval_seconds": f"{t.eval_seconds:.6g}",
            "forecast_setup_seconds": f"{t.setup_seconds:.6g}",
            "forecast_costliest_step_seconds": f"{(self.costliest or t).step_seconds:.6g}",
            "forecast_timing_source": t.source[:500],
            "forecast_expected_steps": str(e.steps),
            "forecast_expected_wall_seconds": f"{e.wall_seconds:.6g}",
            "forecast_expected_accelerator_hours": f"{e.accelerator_hours:.6g}",
            "forecast_expected_usd": f"{e.usd:.6g}",
            "forecast_worst_steps": str(w.steps),
            "forecast_worst_wall_seconds": f"{w.wall_seconds:.6g}",
            "forecast_worst_accelerator_hours": f"{w.accelerator_hours:.6g}",
            "forecast_worst_usd": f"{w.usd:.6g}",
            "forecast_assumption": self.assumption[:500],
        }


def accelerators_per_trial(plan: SweepPlan) -> float:
    """GPUs of a whole trial, or its CPU cores when it uses no GPU (as sweeper/cost/prices.py)."""
    return plan.trial_resources.gpus or plan.trial_resources.cpus


def sweep_price(plan: SweepPlan) -> tuple[str, float]:
    cost, resources = plan.spec.cost, plan.spec.resources
    accelerator = cost.resolved_accelerator(resources.use_gpu)
    return accelerator, price_per_hour(accelerator, cost.usd_per_hour, cost.prices)


def evaluations_between(start: int, end: int, eval_every: int, max_steps: int) -> int:
    """Evaluations a trial runs training from step `start` to `end` (it also evaluates at
    max_steps when that is not a multiple of eval_every)."""
    count = end // eval_every - start // eval_every
    if end == max_steps and max_steps % eval_every:
        count += 1
    return count


def expected_ladder(plan: SweepPlan) -> tuple[list[tuple[int, int]], str, bool]:
    """(ladder, assumption, each segment of a ranked trial is a new Train run) for the
    expected case."""
    spec = plan.spec
    n, max_steps = spec.search.num_trials, spec.training.max_steps
    scheduler = spec.early_stopping.scheduler
    counts = plan.trials_per_milestone()
    if counts is not None:
        return counts, "ASHA by promotion: the ladder is known before launch (failed trials only lower it)", True
    if scheduler == "asha_stopping" and spec.search.parameters:
        reaching, counts = n, []
        for milestone in [*plan.rungs, max_steps]:
            counts.append((milestone, reaching))
            reaching = max(1, rung_quota(reaching, spec.early_stopping.reduction_factor_for()))
        return counts, "Ray's ASHA (by stopping): assumed to follow the same ladder as ASHA by promotion", False
    why = {"median": "median stopping decides as results arrive: assumed to prune nothing"}.get(
        scheduler, "no early stopping"
    )
    return [(max_steps, n)], why, False


def _scenario(plan: SweepPlan, timing: TrialTiming, ladder: list[tuple[int, int]], restart_per_segment: bool) -> Scenario:
    training = plan.spec.training
    # Startup trials train every segment in one Train run: no restart after the first.
    unranked = plan.spec.early_stopping.startup_trials_for() if restart_per_segment else 0
    slots = plan.concurrent_trials
    # The first wave of trials starts cold.
    first_wave = min(slots, ladder[0][1])
    steps, trial_seconds, wall = 0, first_wave * timing.cold_start_seconds, timing.cold_start_seconds
    previous = 0
    for index, (milestone, trials) in enumerate(ladder):
        segment_steps = milestone - previous
        evaluations = evaluations_between(previous, milestone, training.eval_every, training.max_steps)
        runs = 1 if (restart_per_segment or index == 0) else 0  # a new Train run
        starting = trials if index == 0 else runs * (trials - unranked)
        start_seconds = timing.setup_seconds + timing.stop_seconds
        seconds = runs * start_seconds + segment_steps * timing.step_seconds + evaluations * timing.eval_seconds
        steps += trials * segment_steps
        trial_seconds += trials * (seconds - runs * start_seconds) + starting * start_seconds
        waves = math.ceil(trials / max(1, slots))
        wall += waves * (seconds + runs * timing.turnaround_seconds)
        previous = milestone
    accelerator_hours = trial_seconds / 3600 * accelerators_per_trial(plan)
    _, usd_per_hour = sweep_price(plan)
    return Scenario(steps, trial_seconds, wall, accelerator_hours, accelerator_hours * usd_per_hour)


def forecast_sweep(plan: SweepPlan, timing: TrialTiming, costliest: TrialTiming | None = None) -> Forecast:
    """Expected and worst-case cost of the sweep `plan`. `timing` is the first config's;
    `costliest` the dearest config's in the space: the worst case trains every trial at
    it, the expected case at the mean of the two (sampled configs lie between)."""
    spec = plan.spec
    # Steps of the costliest config can time below the first's (noise on a busy machine).
    costliest = max(costliest or timing, timing, key=lambda t: t.step_seconds)
    ladder, assumption, restarts = expected_ladder(plan)
    worst_ladder = [(spec.training.max_steps, spec.search.num_trials)]
    accelerator, usd_per_hour = sweep_price(plan)
    mean = TrialTiming(
        (timing.step_seconds + costliest.step_seconds) / 2,
        (timing.eval_seconds + costliest.eval_seconds) / 2,
        (timing.setup_seconds + costliest.setup_seconds) / 2,
        timing.source,
        timing.stop_seconds,
        timing.turnaround_seconds,
        timing.cold_start_seconds,
    )
    return Forecast(
        timing=mean,
        expected=_scenario(plan, mean, ladder, restarts),
        worst=_scenario(plan, costliest, worst_ladder, False),
        ladder=ladder,
        assumption=assumption,
        slots=plan.concurrent_trials,
        accelerators_per_trial=accelerators_per_trial(plan),
        accelerator=accelerator,
        usd_per_hour=usd_per_hour,
        costliest=costliest,
    )


# ------------------------------------------------------------------ throughput model


def model_parameters(spec) -> int | None:
    """Parameters of the base model (frozen and trainable): from its config.json (the
    built-in tiny model, a local directory, or a hub id's config in the Hugging Face
    cache), else from a size in a hub id's name ('Qwen2.5-0.5B' is 0.5e9). None when
    neither says."""
    name = spec.model.name_or_path
    config = _local_config(name)
    if config is not None:
        return _decoder_parameters(config)
    match = re.search(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", name.split("/")[-1])
    return int(float(match.group(1)) * 1e9) if match else None


def _local_config(name: str) -> dict | None:
    from trainables.models import BUILTIN_TINY_MODEL, DEFAULT_CACHE_ROOT
    from trainables import tiny

    if name == BUILTIN_TINY_MODEL:
        built = Path(DEFAULT_CACHE_ROOT) / f"tiny-llama-v{tiny.VERSION}" / "config.json"
        return json.loads(built.read_text()) if built.is_file() else TINY_LLAMA_CONFIG
    candidate = Path(name).expanduser() / "config.json"
    if candidate.is_file():
        return json.loads(candidate.read_text())
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
    except Exception:  # not a valid repo id: no cached config to read
        return None
    return json.loads(Path(cached).read_text()) if isinstance(cached, str) else None


def _decoder_parameters(config: dict) -> int | None:
    """A Llama-style decoder's parameter count from its config (attention with grouped
    key/value heads, a gated MLP, norms, embeddings and head)."""
    try:
        vocab, hidden = config["vocab_size"], config["hidden_size"]
        inter, layers = config["intermediate_size"], config["num_hidden_layers"]
        heads = config["num_attention_heads"]
    except KeyError:
        return None
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * inter
    head = 0 if config.get("tie_word_embeddings", False) else vocab * hidden
    return vocab * hidden + layers * (attention + mlp + 2 * hidden) + hidden + head


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
    parameters = model_parameters(spec)
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


def first_trial_cost(spec, accelerators: float) -> tuple[float, float] | None:
    """(seconds, USD) of the least a trial spends, from the throughput model: its start and
    the steps to the first rung (to max_steps without early stopping). None when the
    model's size is unknown. Budgets smaller than this cannot run one trial."""
    accelerator = spec.cost.resolved_accelerator(spec.resources.use_gpu)
    try:
        usd_per_hour = price_per_hour(accelerator, spec.cost.usd_per_hour, spec.cost.prices)
    except KeyError:
        return None  # an unknown accelerator is reported by its own check
    timing = modelled_timing(spec, accelerator, accelerators)
    if timing is None:
        return None
    stopping, training = spec.early_stopping, spec.training
    first = (
        stopping.grace_period_for(training.max_steps, training.eval_every)
        if stopping.scheduler in ("asha", "asha_stopping")
        else training.max_steps
    )
    evaluations = evaluations_between(0, first, training.eval_every, training.max_steps)
    seconds = timing.setup_seconds + first * timing.step_seconds + evaluations * timing.eval_seconds
    return seconds, seconds / 3600 * accelerators * usd_per_hour


# ------------------------------------------------------------------ terminal


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:.6f}"


def forecast_lines(forecast: Forecast, unit: str) -> list[str]:
    """The forecast as lines for the terminal; `unit` names the accelerator-hours (GPU-hours
    or CPU core-hours)."""
    t = forecast.timing
    ladder = ", ".join(f"{n} to step {step}" for step, n in forecast.ladder)
    lines = [
        f"Step budget by rung: {ladder} ({forecast.expected.steps} steps; {forecast.worst.steps} without early stopping)",
        f"Expected case: {forecast.assumption}",
        f"Step time: {t.step_seconds * 1000:.1f} ms per step (mean of the first and the costliest config; "
        f"costliest {(forecast.costliest or t).step_seconds * 1000:.1f} ms), {t.eval_seconds * 1000:.0f} ms per "
        f"evaluation, {t.setup_seconds:.1f} s per trial start",
        f"Timing source: {t.source}",
        f"Price: {_usd(forecast.usd_per_hour)} per {unit.removesuffix('s')} ({forecast.accelerator}), "
        f"{forecast.accelerators_per_trial:g} per trial, {forecast.slots} trial(s) at once",
    ]
    for label, scenario in (("Expected", forecast.expected), ("Worst case (no pruning)", forecast.worst)):
        lines.append(
            f"{label}: {_duration(scenario.wall_seconds)} wall, {scenario.accelerator_hours:.4g} {unit}, "
            f"{_usd(scenario.usd)}"
        )
    lines += forecast.notes
    return lines
