"""`sweep plan`: validate a sweep and forecast its cost without running it; and the
forecast as both `sweep plan` and `sweep start` compute and print it (with what each
budget cap means against it)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from sweeper.cost.memory import gpu_memory_gib, launch_card_gib, with_gpu_packing
from sweeper.cost.prices import sweep_rate
from sweeper.cost.throughput import RayPart, TrialTiming, modelled_timing
from sweeper.errors import UserError
from sweeper.plan.forecast import Forecast, dearer, forecast_sweep, mean_of_configs, with_spread
from sweeper.plan.forecast_lines import forecast_lines, forecast_summary
from sweeper.plan.inputs import SweepInputs
from sweeper.plan.machine_profile import MachineProfile, machine_key, sweep_shape
from sweeper.plan.sweep_plan import ClusterResources, SweepPlan, make_plan
from sweeper.spec.schema import SweepSpec, trials_text

__all__ = ["plan_sweep", "sweep_forecast", "local_cluster", "print_forecast"]

logger = logging.getLogger(__name__)


def local_cluster() -> ClusterResources:
    """What `ray.init()` would start on this machine (all cores, all GPUs), without Ray."""
    cpus = float(os.cpu_count() or 1)
    try:
        import torch

        gpus = float(torch.cuda.device_count())
    except ImportError:
        gpus = 0.0
    return ClusterResources(cpus=cpus, gpus=gpus, max_node_cpus=cpus, max_node_gpus=gpus)


def sweep_forecast(
    plan: SweepPlan, cluster: ClusterResources, inputs: SweepInputs | None, *, on_cluster: bool,
    measure_ray_part: Callable[[], RayPart | None] | None = None,
) -> Forecast:
    """The plan's forecast: calibrated when `inputs` are given (on the cluster as Ray
    tasks when `on_cluster`; as many copies side by side as the sweep runs workers at
    once on a node of `cluster`), else from the throughput model. Raises UserError when
    the model's size is unknown and nothing is calibrated. `measure_ray_part` (where Ray
    is up: `sweep start`) measures Ray's part of a trial on the cluster, for a calibrated
    forecast that this machine has no sweep of the same shape to learn from."""
    spec = plan.spec
    if inputs is not None:
        from sweeper.plan.calibrate import calibrate, side_by_side

        calibration = calibrate(spec, inputs.data, inputs.model_source, on_cluster=on_cluster,
                                copies=side_by_side(plan, cluster))
        # What the calibration cannot see (the driver, Ray, logging, starts and stops under
        # the sweep's load), as this machine's last sweeps measured it.
        machine = machine_key(cluster, on_cluster=on_cluster)
        profile = MachineProfile.load(machine, sweep_shape(plan))
        ray_part = measure_ray_part() if profile is None and measure_ray_part is not None else None

        def as_here(timing: TrialTiming) -> TrialTiming:
            if profile is not None:
                return profile.applied(timing)
            return ray_part.applied(timing) if ray_part is not None else timing

        copies = calibration.per_copy or [(calibration.first, calibration.costliest)]
        forecast = with_spread(
            forecast_sweep(plan, as_here(calibration.first), as_here(calibration.costliest)), plan,
            [(as_here(first), as_here(costliest)) for first, costliest in copies],
        )
        forecast = replace(
            forecast, calibrated=mean_of_configs(calibration.first, dearer(calibration.first, calibration.costliest)),
            machine=machine,
            machine_note=profile.line() if profile else None,
            ray_part=ray_part,
        )
        forecast.notes.append(f"Calibration took {calibration.seconds:.1f} s ({calibration.copies} side by side)")
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


def print_forecast(forecast: Forecast, spec: SweepSpec, console: Console, brief: bool = False) -> None:
    """The forecast's lines, then one line per budget cap on what it means against them.
    `brief` (`sweep start`): the forecast in one line on `console`, its lines in the log
    (the sweep's driver.log), the caps' lines on both."""
    from sweeper.plan.budget import budget_lines

    unit = "GPU-hours" if spec.resources.use_gpu else "CPU core-hours"
    lines = forecast_lines(forecast, unit)
    caps = budget_lines(spec.budget, forecast) if spec.budget is not None else []
    if brief:
        for line in lines:
            logger.info("%s", line)
        lines = [forecast_summary(forecast)]
    for line in lines + caps:
        console.print(line, highlight=False, soft_wrap=True)


def plan_sweep(
    file: Path, *, address: str | None, calibrate: bool, console: Console,
    measure_ray_part: Callable[[SweepPlan, str | None], RayPart | None] | None = None,
) -> Forecast:
    """`sweep plan FILE`: validate, size the plan against the cluster (`address`, else
    this machine as a local cluster would use it), calibrate unless told not to, print.
    Calibrating, where this machine has no sweep of the shape to learn from,
    `measure_ray_part(plan, address)` measures Ray's part of a trial as `sweep start` does
    (sweeper/run/ray_part.py)."""
    from sweeper.plan.checks import load_checked_spec
    from sweeper.plan.inputs import prepare_inputs
    from trainables.models import DEFAULT_CACHE_ROOT

    started = time.time()
    spec = load_checked_spec(file)
    if spec.search.warm_start:
        from sweeper.search.warm_start import read_warm_start

        read_warm_start(spec)  # as `sweep start` reads it: an earlier sweep it cannot read is the same keyed line
    if address:
        from sweeper.cluster.connect import start_ray

        # As `sweep start --address` joins: probed first, in token mode where a token is,
        # a keyed line when the address does not answer or refuses the token.
        start_ray(address, metadata={"job_name": f"{spec.name} (sweep plan)"})
        cluster = ClusterResources.from_ray()
        card_gib = launch_card_gib(spec)
    else:
        cluster = local_cluster()  # calibrated in this process (and its copies): the same hardware
        card_gib = gpu_memory_gib(spec.cost.accelerator)
    spec, packing = with_gpu_packing(spec, card_gib)
    if packing is not None:
        console.print(packing.describe(), highlight=False, soft_wrap=True)
    plan = make_plan(spec, cluster)
    inputs = prepare_inputs(spec, DEFAULT_CACHE_ROOT) if calibrate else None
    console.print(
        f"Sweep {spec.name!r} ({file}): {trials_text(spec)}, {plan.concurrent_trials} at a time on "
        f"{cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs ({plan.trial_resources.workers} worker(s) per trial)",
        highlight=False,
        soft_wrap=True,
    )
    forecast = sweep_forecast(
        plan, cluster, inputs, on_cluster=bool(address),
        measure_ray_part=(lambda: measure_ray_part(plan, address)) if measure_ray_part else None,
    )
    print_forecast(forecast, spec, console)
    if spec.resources.use_gpu:
        from sweeper.cost.memory import forecast_trial_memory

        memory = forecast_trial_memory(spec)
        console.print(memory.describe() if memory else "Memory: no forecast (the model's config cannot be read)",
                      highlight=False, soft_wrap=True)
    console.print(f"Planned in {time.time() - started:.1f} s; nothing was started.", highlight=False)
    return forecast
