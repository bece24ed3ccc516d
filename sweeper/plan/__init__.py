"""Before a sweep runs: the checks that read files, the model and the cache; the plan
(trials at once, resources per trial); the rung arithmetic; the forecast of time and
cost (calibrated or modelled); what the budget caps mean; the `sweep plan` command.

- `checks`: the one validation pass of `sweep validate`, `plan` and `start`;
- `inputs`: the model source, tokenizer and tokenized data, prepared once per sweep;
- `sweep_plan`: `SweepPlan` against the cluster's resources;
- `rungs`: ASHA rung placement and how many trials each rung keeps;
- `forecast`: expected and worst-case wall time, accelerator-hours and USD;
- `slots`: the forecast's runs on the sweep's slots, and the stretches with slots idle;
- `forecast_lines`: how a forecast reads on the terminal;
- `calibrate`: measured step times, run as the sweep will run them;
- `machine_profile`: what the calibration cannot see, as this machine's last sweeps measured it;
- `live`: the forecast re-estimated from what a running sweep measured;
- `budget`: the caps against the forecast and against one trial's least cost;
- `command`: `sweep plan`, and the forecast printed by `sweep start`.
"""

__all__ = [
    "checks", "inputs", "sweep_plan", "rungs", "forecast", "slots", "forecast_lines", "calibrate", "machine_profile", "live",
    "budget", "command",
]
