"""How a forecast reads: the lines `sweep plan` and `sweep start` print (the step budget,
timing, price, expected and worst case), how far apart the calibration's copies were, and
which parts were measured and which modelled."""

from __future__ import annotations

from sweeper.cost.throughput import RAY_TRIAL_START_SECONDS
from sweeper.plan.forecast import Forecast
from sweeper.views import usd

__all__ = ["forecast_lines", "forecast_summary", "spread_line", "measured_line"]


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


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
        f"Price: {usd(forecast.usd_per_hour)} per {unit.removesuffix('s')} ({forecast.accelerator}), "
        f"{forecast.accelerators_per_trial:g} per trial, {forecast.slots} trial(s) at once",
    ]
    worst = "Worst case (no pruning)"
    if forecast.bought_trials is not None:  # until a budget cap: what the caps buy either way
        worst = f"Without early stopping ({forecast.bought_full_trials} trial(s) to the end)"
        expected = f"Expected ({forecast.bought_trials} trials)"
    elif forecast.uncapped is not None:  # a cap stops the sweep of search.num_trials first
        share = forecast.expected.value(forecast.cut_by) / max(forecast.uncapped.value(forecast.cut_by), 1e-12)
        expected = f"Expected (budget.{forecast.cut_by} stops it at about {share:.0%} of all its trials' expected work)"
    else:
        expected = "Expected"
    for label, scenario in ((expected, forecast.expected), (worst, forecast.worst)):
        lines.append(
            f"{label}: {_duration(scenario.wall_seconds)} wall, {scenario.accelerator_hours:.4g} {unit}, "
            f"{usd(scenario.usd)}"
        )
    lines += [spread_line(forecast), measured_line(forecast)]
    lines += forecast.notes
    return lines


def forecast_summary(forecast: Forecast) -> str:
    """The forecast in one line (what `sweep start` shows; `forecast_lines` has the rest)."""
    t, expected, worst = forecast.timing, forecast.expected, forecast.worst
    source = "calibrated" if forecast.measured_copies else "throughput model"
    return (
        f"Forecast: {_duration(expected.wall_seconds)}, {usd(expected.usd)} expected "
        f"({_duration(worst.wall_seconds)}, {usd(worst.usd)} without early stopping); "
        f"{t.step_seconds * 1000:.0f} ms a step, {t.eval_seconds * 1000:.0f} ms an evaluation, "
        f"{t.setup_seconds:.1f} s a trial start ({source})"
    )


def spread_line(forecast: Forecast) -> str:
    """How far apart the calibration's measurements were, and what that moves."""
    if forecast.measured_copies == 0:
        return "Spread: none measured (throughput model); the live ETA corrects it from the first evaluations"
    spread = forecast.spread
    if spread is None:
        return (
            "Spread: one copy measured (the sweep runs one worker at a time on a node), no spread; "
            "the live ETA corrects the figures from the first evaluations"
        )
    fast, slow, low, high = spread.fastest, spread.slowest, spread.low, spread.high
    return (
        f"Spread across the {spread.copies} copies: "
        f"{_range(fast.step_seconds * 1000, slow.step_seconds * 1000, '{:.1f}')} ms per step, "
        f"{_range(fast.eval_seconds * 1000, slow.eval_seconds * 1000, '{:.0f}')} ms per evaluation, "
        f"{_range(fast.setup_seconds, slow.setup_seconds, '{:.1f}')} s per start; expected "
        f"{_range(low.wall_seconds, high.wall_seconds, _duration)} wall, {_range(low.usd, high.usd, usd)}"
    )


def _range(low: float, high: float, form) -> str:
    """`low-high` in `form` (a format string or a function), one figure where they read the same."""
    text = form.format if isinstance(form, str) else form
    return text(low) if text(low) == text(high) else f"{text(low)}-{text(high)}"


def measured_line(forecast: Forecast) -> str:
    """Which parts of the forecast were measured here and which are modelled."""
    t = forecast.timing
    overheads = (
        f"a trial's stop ({t.stop_seconds:.1f} s), a slot's turnaround ({t.turnaround_seconds:.1f} s), "
        f"the first wave's cold start ({t.cold_start_seconds:.1f} s), the driver's and Ray's share of the cores, "
        "a trial alone as fast as beside others"
    )
    survival = "which trials early stopping stops (the rung ladder)"
    if forecast.measured_copies == 0:
        return f"Measured: nothing; modelled: step and evaluation time (FLOPs at an assumed utilisation), trial start, {overheads}, {survival}"
    if forecast.machine_note:
        return (
            "Measured: step time, evaluation time, the training loop's setup (calibration); what a sweep adds, "
            f"{forecast.machine_note}; modelled: {survival}"
        )
    if forecast.ray_part is not None:
        # The empty trials' busy threads had Ray's processes and the driver's Tune loop beside
        # them, not its MLflow logging and live table, nor real neighbours' starts.
        cores = (
            "what the driver's logging and the neighbours' starts and evaluations take of the cores"
            if forecast.ray_part.cpu_share is not None else "the driver's and Ray's share of the cores"
        )
        rest = cores if forecast.ray_part.alone_ratio is not None else f"{cores}, a trial alone as fast as beside others"
        return (
            f"Measured: step time, evaluation time, the training loop's setup; {forecast.ray_part.line()}; modelled "
            f"(no sweep of this shape has ended on this machine yet): {rest}, {survival}"
        )
    return (
        "Measured: step time, evaluation time, the training loop's setup; modelled (no sweep of this shape has "
        f"ended on this machine yet): Ray's part of a trial start ({RAY_TRIAL_START_SECONDS:.1f} s), {overheads}, {survival}"
    )
