"""`sweep plan`: validate a sweep and forecast its cost without running it, and the same
forecast printed (and logged to the parent run) by `sweep start`."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich.console import Console

from sweeper.plan.forecast import Forecast, accelerators_per_trial, forecast_lines, forecast_sweep, modelled_timing
from sweeper.plan.sweep_plan import ClusterResources, SweepPlan, make_plan
from sweeper.spec.schema import SweepSpec

__all__ = ["plan_sweep", "sweep_forecast", "local_cluster", "print_forecast"]


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
    plan: SweepPlan, cluster: ClusterResources, data: dict | None, model_source: str | None, *, calibrate: bool, on_cluster: bool
) -> Forecast:
    """The plan's forecast: calibrated (`data` tokenized, `model_source` resolved; on the
    cluster as Ray tasks when `on_cluster`; as many copies side by side as the sweep runs
    workers at once on a node of `cluster`), or from the throughput model. Raises
    UserError when the model's size is unknown and calibration is off."""
    spec = plan.spec
    if calibrate:
        from sweeper.plan.calibrate import calibrate as run_calibration, side_by_side

        calibration = run_calibration(spec, data, model_source, on_cluster=on_cluster, copies=side_by_side(plan, cluster))
        forecast = forecast_sweep(plan, calibration.first, calibration.costliest)
        forecast.notes.append(f"Calibration took {calibration.seconds:.1f} s ({calibration.copies} side by side)")
        return forecast
    accelerator = spec.cost.resolved_accelerator(spec.resources.use_gpu)
    timing = modelled_timing(spec, accelerator, accelerators_per_trial(plan))
    if timing is None:
        from sweeper.errors import UserError

        raise UserError(
            f"model.name_or_path: the size of {spec.model.name_or_path!r} is unknown (no config.json here or in "
            "the Hugging Face cache, no size in the name); run sweep plan without --no-calibrate"
        )
    return forecast_sweep(plan, timing)


def print_forecast(forecast: Forecast, spec: SweepSpec, console: Console) -> None:
    unit = "GPU-hours" if spec.resources.use_gpu else "CPU core-hours"
    for line in forecast_lines(forecast, unit):
        console.print(line, highlight=False, soft_wrap=True)


def plan_sweep(file: Path, *, address: str | None, calibrate: bool, console: Console) -> Forecast:
    """`sweep plan FILE`: validate, size the plan against the cluster (ADDR, else this
    machine as a local cluster would use it), calibrate unless told not to, print."""
    from sweeper.run.launch import prepare_data
    from sweeper.spec.schema import load_spec
    from trainables.models import DEFAULT_CACHE_ROOT, resolve_model_source

    started = time.time()
    spec = load_spec(file)
    on_cluster = bool(address)
    if address:
        from sweeper.run.launch import start_ray

        # As `sweep start --address` joins: probed first, in token mode where a token is,
        # a keyed line when the address does not answer or refuses the token.
        start_ray(address, metadata={"job_name": f"{spec.name} (sweep plan)"})
        cluster = ClusterResources.from_ray()
    else:
        cluster = local_cluster()  # calibrated in this process (and its copies): the same hardware
    plan = make_plan(spec, cluster)
    data = model_source = None
    if calibrate:
        data, _ = prepare_data(spec, DEFAULT_CACHE_ROOT)
        model_source = resolve_model_source(spec.model.name_or_path, DEFAULT_CACHE_ROOT)
    console.print(
        f"Sweep {spec.name!r} ({file}): {spec.search.num_trials} trials, {plan.concurrent_trials} at a time on "
        f"{cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs ({plan.trial_resources.workers} worker(s) per trial)",
        highlight=False,
        soft_wrap=True,
    )
    forecast = sweep_forecast(plan, cluster, data, model_source, calibrate=calibrate, on_cluster=on_cluster)
    print_forecast(forecast, spec, console)
    if spec.resources.use_gpu:
        from sweeper.cost.memory import forecast_trial_memory

        memory = forecast_trial_memory(spec)
        console.print(memory.describe() if memory else "Memory: no forecast (the model's config cannot be read)",
                      highlight=False, soft_wrap=True)
    if spec.budget is not None:
        from sweeper.spec.budget import budget_lines

        for line in budget_lines(spec.budget, forecast):
            console.print(line, highlight=False, soft_wrap=True)
    console.print(f"Planned in {time.time() - started:.1f} s; nothing was started.", highlight=False)
    return forecast


class SweepBudget:
    """What `sweep start` adds for the forecast and the budget (sweeper/run/launch.py calls it
    at marked hook points): the forecast printed and logged to the parent run, the caps
    enforced through a searcher wrapper and a stopper, and what they cut reported."""

    def __init__(self, spec: SweepSpec, plan: SweepPlan, forecast: Forecast | None, guard):
        self.spec, self.plan, self.forecast, self.guard = spec, plan, forecast, guard

    @classmethod
    def forecast_sweep(cls, spec, plan, data, cache_root, console: Console, on_cluster: bool) -> "SweepBudget":
        """Calibrate and print the forecast (before the sweep's clock starts; Ray is up)."""
        from trainables.models import resolve_model_source

        model_source = resolve_model_source(spec.model.name_or_path, cache_root)
        cluster = ClusterResources.from_ray()
        forecast = sweep_forecast(plan, cluster, data, model_source, calibrate=True, on_cluster=on_cluster)
        print_forecast(forecast, spec, console)
        if spec.budget is not None:
            from sweeper.spec.budget import budget_lines

            for line in budget_lines(spec.budget, forecast):
                console.print(line, highlight=False, soft_wrap=True)
        return cls(spec, plan, forecast, None)

    def attach(self, book, tracker) -> None:
        """Log the forecast to the parent run (`forecast_*` params); caps measured on `book`."""
        from sweeper.run.budget_guard import make_guard

        _log_params(tracker, self.forecast.as_params())
        self.guard = make_guard(self.spec, self.plan, book, self.forecast)

    def reattach(self, search_alg, stopper, book):
        """For `sweep resume`: the guard that Tune restored with the searcher and stopper
        (pickled without a book) now measures on the resumed `book`. Returns the searcher
        inside the budget's wrapper (the sweep's own, whose state the caller rebuilds)."""
        from sweeper.run.budget_guard import BudgetSearcher, BudgetStopper

        if isinstance(stopper, BudgetStopper):
            self.guard = stopper.guard
        if isinstance(search_alg, BudgetSearcher):
            self.guard = self.guard or search_alg.guard
            search_alg.guard = self.guard  # one guard, as when the sweep started
            search_alg = search_alg.searcher
        if self.guard is not None:
            self.guard.book = book
        return search_alg

    def searcher(self, search_alg):
        """The search algorithm, wrapped so that no trial starts past a cap."""
        if self.guard is None or search_alg is None:
            return search_alg
        from sweeper.run.budget_guard import BudgetSearcher

        return BudgetSearcher(search_alg, self.guard)

    def stopper(self):
        """The RunConfig stopper that ends the sweep at a cap (None without a budget)."""
        if self.guard is None:
            return None
        from sweeper.run.budget_guard import BudgetStopper

        return BudgetStopper(self.guard)

    def cut(self) -> bool:
        """True when a cap ended the sweep early (it is not an interrupted sweep)."""
        return self.guard is not None and self.guard.cut()

    def finish(self, tracker, run) -> None:
        """Forecast against actual (a resumed sweep has no forecast of its own: the first
        driver logged it), and what the caps cut, on the parent run and in the summary."""
        metrics, tags = {}, {}
        if self.forecast is not None:
            expected = self.forecast.expected
            metrics = {
                "forecast_expected_usd": expected.usd,
                "forecast_expected_wall_seconds": expected.wall_seconds,
                "forecast_expected_accelerator_hours": expected.accelerator_hours,
                "forecast_worst_usd": self.forecast.worst.usd,
                "forecast_worst_wall_seconds": self.forecast.worst.wall_seconds,
            }
        if self.guard is not None:
            tags, budget_metrics = self.guard.as_tags_and_metrics()
            metrics.update(budget_metrics)
        if metrics or tags:
            _log_metrics(tracker, metrics, tags)
        if self.forecast is not None:
            actual_wall = time.time() - run.book.started_at
            run.notes.append(
                f"Forecast: {expected.wall_seconds:.0f} s, ${expected.usd:.6f} expected; actual: {actual_wall:.0f} s "
                f"(trials' phase), ${run.cost.usd:.6f}"
            )
        if self.guard is not None and self.guard.summary():
            run.notes.append(f"Budget: {self.guard.summary()}")


def _log_params(tracker, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    tracker.client.log_batch(tracker.parent_run_id, params=[Param(k, v) for k, v in params.items()])


def _log_metrics(tracker, metrics: dict[str, float], tags: dict[str, str]) -> None:
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    tracker.client.log_batch(
        tracker.parent_run_id,
        metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
