"""Before a sweep runs: the checks that read files, the model and the cache
(`load_checked_spec`, `check_spec`); the sweep's inputs prepared once (`prepare_inputs`);
the plan against the cluster (`make_plan`, `SweepPlan`); the rung arithmetic; the forecast
of time and cost (`Forecast`, calibrated by `_calibrate`); what the budget caps mean
(`CAPS`); the `sweep plan` command (`plan_sweep`) and the forecast `sweep start` prints
(`start_forecast`).
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "load_checked_spec", "check_spec", "SweepInputs",
    "prepare_inputs", "SweepPlan", "ClusterResources", "make_plan", "asha_rungs", "evaluations_between",
    "milestone_counts", "promotion_steps", "rung_quota", "generation_steps", "Forecast", "Scenario", "TrialAt", "remaining",
    "stretch_seconds", "within_caps", "after", "run_training", "CAPS", "plan_sweep", "start_forecast",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "load_checked_spec": "_checks", "check_spec": "_checks",
    "SweepInputs": "_inputs", "prepare_inputs": "_inputs",
    "SweepPlan": "_sweep_plan", "ClusterResources": "_sweep_plan", "make_plan": "_sweep_plan",
    "generation_steps": "_sweep_plan",
    "asha_rungs": "_rungs", "evaluations_between": "_rungs", "milestone_counts": "_rungs",
    "promotion_steps": "_rungs", "rung_quota": "_rungs",
    "Forecast": "_forecast", "Scenario": "_forecast", "TrialAt": "_forecast", "remaining": "_forecast",
    "stretch_seconds": "_forecast", "within_caps": "_forecast", "after": "_forecast",
    "run_training": "_calibrate",
    "CAPS": "_caps",
    "plan_sweep": "_command", "start_forecast": "_command",
}

__getattr__ = lazy_getattr(__name__, _HOME)
