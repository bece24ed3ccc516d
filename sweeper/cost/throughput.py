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

from dataclasses import dataclass, replace
from pathlib import Path

from sweeper.cost.architecture import parameter_count

__all__ = ["PEAK_TFLOPS", "UTILISATION", "TrialTiming", "RayPart", "modelled_timing", "RAY_TRIAL_START_SECONDS"]

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
# stands idle between two trials (not counted in any trial's cost). What `sweep plan`
# assumes before any sweep of the shape has ended on the machine; `sweep start` measures
# them on its cluster instead (RayPart).
RAY_TRIAL_START_SECONDS = 1.0


TRIAL_STOP_SECONDS = 0.3


SLOT_TURNAROUND_SECONDS = 0.5


# The first trial on each slot starts its trial actor and Train worker processes cold
# (the first two quickstart trials' setup: 2.2-3.0 s, the later ones' 0.8-1.8 s).
COLD_START_SECONDS = 1.2


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
    # The sweep's wall time over what the forecast's slot arithmetic gives at the sweep's
    # own measured figures: what that arithmetic misses (this machine's sweeps of the same
    # shape measured it, sweeper/plan/machine_profile.py; 1.0 before any has).
    wall_ratio: float = 1.0
    # A run's seconds while it trains alone over its seconds beside the other slots' runs:
    # below 1 where trials share cores (the 2-core machine: about 0.8), about 1 on GPUs of
    # their own. With some slots idle, by the share idle (sweeper/plan/slots.py). The
    # live forecast measures it; 1.0 before anything has.
    alone_ratio: float = 1.0
    # The training thread's CPU time over its wall time while these steps were timed (the
    # calibration's `train_cpu_share`, 0.97-1.00 on the 2-core machine); None where not
    # measured. Below 1 the thread waited for a core.
    cpu_share: float | None = None


@dataclass(frozen=True)
class RayPart:
    """What the sweep's own cluster adds to a trial, as it ran just now: a few trials of an
    empty training loop, started as the sweep starts its trials (sweeper/run/ray_part.py).
    Stands in for the constants (RAY_TRIAL_START_SECONDS, COLD_START_SECONDS,
    TRIAL_STOP_SECONDS, SLOT_TURNAROUND_SECONDS) where no sweep of the same shape has ended
    on this machine yet (sweeper/plan/machine_profile.py).

    It also measures the training thread's share of a core beside the sweep's processes:
    the empty loop keeps its thread busy between two reports, as many at once as the sweep
    trains, with Ray's processes, the trial actors and the driver's Tune loop around it. On
    the 2-core machine a sweep's training thread gets 0.75-0.89 of a core where the
    calibration's got 0.97-1.00, and the sweep's steps ran 1.2-1.6x the calibrated step. The
    calibrated step and evaluation are stretched by the ratio of the two shares, which covers
    part of that: the first forecasts read 1-21 % low in wall time on the two-slot sweeps
    there (benchmarks/README.md, session 40). Before, the stop and turnaround constants
    (0.3 + 0.5 s, against a measured 0.1-0.2 s) held about that much time on two-slot sweeps
    and overshot on one-slot ones (+15 to +39 %)."""

    start_seconds: float  # a Train run's start in a reused trial actor (RAY_TRIAL_START_SECONDS)
    report_seconds: float  # a report's way from the workers to the driver
    cold_start_seconds: float  # the first wave's extra (COLD_START_SECONDS)
    trials: int  # the empty trials measured
    seconds: float  # how long measuring took
    stop_seconds: float = TRIAL_STOP_SECONDS  # a run's last report to its end
    turnaround_seconds: float = SLOT_TURNAROUND_SECONDS  # a run's end to the next run's start on its slot
    cpu_share: float | None = None  # the busy thread's CPU time over its wall time; None on GPU trials
    # A trial's time alone over its time beside the others (TrialTiming.alone_ratio): an
    # empty trial's busy steps alone after the waves against theirs; None where the sweep
    # runs one trial at a time, or on GPU trials.
    alone_ratio: float | None = None

    def stretch(self, timing: TrialTiming) -> float:
        """How much longer a step and an evaluation take in the sweep than in the calibration
        that timed `timing`: the calibration's CPU share over the one measured here (1 where
        either is unknown: GPU trials, a model's timing)."""
        if not self.cpu_share or not timing.cpu_share:
            return 1.0
        return timing.cpu_share / self.cpu_share

    def applied(self, timing: TrialTiming) -> TrialTiming:
        """A calibrated `timing` (the loop's own setup plus RAY_TRIAL_START_SECONDS) as the
        sweep's cluster runs it: Ray's part of a start, a stop and a turnaround as measured,
        steps and evaluations at the measured share of a core, each evaluation's report, and a
        trial's time alone where measured."""
        stretch = self.stretch(timing)
        source = f"{timing.source}; Ray's part of a trial measured with {self.trials} empty trials on the cluster"
        if stretch != 1.0:
            source += f", steps and evaluations x{stretch:.2f} (a training thread's share of a core there)"
        return replace(
            timing,
            step_seconds=timing.step_seconds * stretch,
            setup_seconds=max(0.0, timing.setup_seconds - RAY_TRIAL_START_SECONDS) + self.start_seconds,
            eval_seconds=timing.eval_seconds * stretch + self.report_seconds,
            cold_start_seconds=self.cold_start_seconds,
            stop_seconds=self.stop_seconds,
            turnaround_seconds=self.turnaround_seconds,
            alone_ratio=timing.alone_ratio if self.alone_ratio is None else self.alone_ratio,
            source=source,
        )

    def line(self) -> str:
        """What was measured, for the "Measured" line of `sweep plan` and `sweep start`."""
        share = "" if self.cpu_share is None else f", a training thread's share of a core ({self.cpu_share:.2f})"
        if self.alone_ratio is not None:
            share += f", a trial alone in x{self.alone_ratio:.2f} of its time beside others"
        return (
            f"Ray's part of a trial start ({self.start_seconds:.1f} s), the first wave's cold start "
            f"({self.cold_start_seconds:.1f} s), a report's way to the driver ({self.report_seconds * 1000:.0f} ms), "
            f"a trial's stop ({self.stop_seconds:.1f} s), a slot's turnaround ({self.turnaround_seconds:.1f} s){share}, "
            f"with {self.trials} empty trials on the cluster in {self.seconds:.1f} s"
        )


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

