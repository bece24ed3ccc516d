"""Running a sweep: the launch (cluster, data, plan, tracker, search, fit, finish), the
function each Tune trial runs (a Ray Train `TorchTrainer`), the driver (the one Tune
callback), the checkpoint janitor, and a sweep's files. The budget while it runs is
`sweeper.budget`'s.

- `launch`: `run_sweep` and `resume_sweep`, top to bottom;
- `sweep_dir`: the sweep folder, its published files and its driver's pid;
- `trial`: `run_trial`, inside each trial's process;
- `driver`: `SweepDriver`, Tune's events -> the book and its listeners;
- `janitor`: removes the adapters of trials that can no longer be the best;
- `from_storage`: a sweep fetched from `storage.uri` alone, for `resume --storage`.
"""

__all__ = ["launch", "sweep_dir", "trial", "driver", "janitor", "from_storage"]
