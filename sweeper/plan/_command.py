"""`sweep plan` (a sweep checked and forecast, nothing run) and the forecast as `sweep plan`
and `sweep start` compute and print it, with what each budget cap means against it."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from rich.console import Console

from sweeper.cost import gpu_memory_gib, launch_card_gib, with_gpu_packing, sweep_rate, modelled_timing
from sweeper.errors import UserError
from sweeper.plan._forecast import Forecast, forecast_lines, forecast_summary, forecast_sweep
from sweeper.plan._inputs import SweepInputs
from sweeper.plan._sweep_plan import ClusterResources, SweepPlan, make_plan
from sweeper.spec import SweepSpec, trials_text

__all__ = ["plan_sweep", "sweep_forecast", "start_forecast", "print_forecast"]

logger = logging.getLogger(__name__)


def sweep_forecast(plan: SweepPlan, inputs: SweepInputs | None) -> Forecast:
    """The plan's forecast: calibrated on the cluster (Ray up) when `inputs` are given, else
    from the throughput model (UserError when the model's size is unknown)."""
    spec = plan.spec
    if inputs is not None:
        from sweeper.plan._calibrate import calibrate

        calibration = calibrate(spec, inputs.data, inputs.model_source)
        forecast = forecast_sweep(plan, calibration.timing)
        forecast.notes.append(f"Calibration took {calibration.seconds:.1f} s")
        return forecast
    rate = sweep_rate(spec)
    timing = modelled_timing(spec, rate.accelerator, rate.accelerators_per_trial)
    if timing is None:
        raise UserError(
            f"model.name_or_path: the size of {spec.model.name_or_path!r} is unknown (no config.json here or in "
            "the Hugging Face cache, no size in the name); calibrate instead: sweep plan without --no-calibrate, "
            "sweep start with cost.calibrate true"
        )
    return forecast_sweep(plan, timing)


def start_forecast(plan: SweepPlan, inputs: SweepInputs, console: Console) -> Forecast:
    """`sweep start`'s forecast (Ray is up): calibrated unless cost.calibrate is false, printed in brief."""
    forecast = sweep_forecast(plan, inputs if plan.spec.cost.calibrate else None)
    print_forecast(forecast, plan.spec, console, brief=True)
    return forecast


def print_forecast(forecast: Forecast, spec: SweepSpec, console: Console, brief: bool = False) -> None:
    """The forecast's lines, then a line per budget cap. `brief` (`sweep start`): the forecast
    in one line on `console`, its lines in the log (the sweep's driver.log)."""
    from sweeper.plan._caps import budget_lines

    unit = "GPU-hours" if spec.resources.use_gpu else "CPU core-hours"
    lines = forecast_lines(forecast, unit)
    caps = budget_lines(spec.budget, forecast) if spec.budget is not None else []
    if brief:
        for line in lines:
            logger.info("%s", line)
        lines = [forecast_summary(forecast)]
    for line in lines + caps:
        console.print(line, highlight=False, soft_wrap=True)


def plan_sweep(spec: SweepSpec, file: Path, *, address: str | None, calibrate: bool, console: Console) -> Forecast:
    """`sweep plan FILE` for `spec`, checked (`load_checked_spec`) from `file`: the plan
    sized against the cluster (`address`, else a local cluster started as `sweep start`
    starts one and stopped before it returns), calibrated there unless told not to, printed."""
    from sweeper.cluster import LOCAL_CLUSTER, start_ray, stop_local_cluster
    from sweeper.plan._inputs import prepare_inputs
    from trainables.models import DEFAULT_CACHE_ROOT

    started = time.time()
    inputs = prepare_inputs(spec, DEFAULT_CACHE_ROOT) if calibrate else None
    on_ray = calibrate or bool(address)
    if on_ray:
        start_ray(address or LOCAL_CLUSTER, metadata={"job_name": f"{spec.name} (sweep plan)"})
    try:
        cluster = ClusterResources.from_ray() if on_ray else _this_machine()
        spec, packing = with_gpu_packing(spec, launch_card_gib(spec) if on_ray else gpu_memory_gib(spec.cost.accelerator))
        if packing is not None:
            console.print(packing.describe(), highlight=False, soft_wrap=True)
        plan = make_plan(spec, cluster)
        console.print(
            f"Sweep {spec.name!r} ({file}): {trials_text(spec)}, {plan.concurrent_trials} at a time on "
            f"{cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs ({plan.trial_resources.workers} worker(s) per trial)",
            highlight=False,
            soft_wrap=True,
        )
        forecast = sweep_forecast(plan, inputs)
    finally:
        if on_ray:
            stop_local_cluster()
    print_forecast(forecast, spec, console)
    if spec.resources.use_gpu:
        from sweeper.cost import forecast_trial_memory

        memory = forecast_trial_memory(spec)
        console.print(memory.describe() if memory else "Memory: no forecast (the model's config cannot be read)",
                      highlight=False, soft_wrap=True)
    console.print(f"Planned in {time.time() - started:.1f} s; nothing was started.", highlight=False)
    return forecast


def _this_machine() -> ClusterResources:
    """What a local cluster would have here (all cores, all GPUs), without starting one.
    Counting GPUs does not initialise CUDA."""
    import os

    try:
        import torch

        gpus = float(torch.cuda.device_count())
    except ImportError:
        gpus = 0.0
    cpus = float(os.cpu_count() or 1)
    return ClusterResources(cpus=cpus, gpus=gpus, max_node_cpus=cpus, max_node_gpus=gpus)
