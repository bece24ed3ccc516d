"""Running a sweep: the launch (cluster, data, plan, tracker, search, fit, finish), the
function each Tune trial runs (a Ray Train `TorchTrainer`), the driver (the one Tune
callback), the checkpoint janitor, the budget caps while running, and a sweep's files.

- `launch`: `run_sweep` and `resume_sweep`, top to bottom;
- `sweep_dir`: the sweep folder, its published files and its driver's pid;
- `trial`: `run_trial`, inside each trial's process;
- `driver`: `SweepDriver`, Tune's events -> the book and its listeners;
- `janitor`: removes the adapters of trials that can no longer be the best;
- `budget` and `budget_guard`: the forecast logged and the caps enforced;
- `from_storage`: a sweep fetched from `storage.uri` alone, for `resume --storage`.
"""

__all__ = ["launch", "sweep_dir", "trial", "driver", "janitor", "budget", "budget_guard", "from_storage"]
