"""Before a sweep runs: the checks that read files, the model and the cache; the plan
(trials at once, resources per trial); the rung arithmetic; the forecast of time and
cost; what the budget caps mean; the `sweep plan` command.

- `checks`: the one validation pass of `sweep validate`, `plan` and `start`;
- `inputs`: the model source, tokenizer and tokenized data, prepared once per sweep;
- `sweep_plan`: `SweepPlan` against the cluster's resources;
- `rungs`: ASHA rung placement and how many trials each rung keeps;
- `forecast`: expected and worst-case wall time, accelerator-hours and USD, and its lines;
- `calibrate`: a trial's step and evaluation measured in Ray tasks with a worker's resources;
- `caps`: the budget caps against the forecast and against one trial's least cost;
- `command`: `sweep plan`, and the forecast printed by `sweep start`.
"""

__all__ = ["checks", "inputs", "sweep_plan", "rungs", "forecast", "calibrate", "caps", "command"]
