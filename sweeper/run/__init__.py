"""Running a sweep: `run_sweep`, `resume_sweep` and `rebuild_sweep` (the launch, top to
bottom, returning a `SweepRun`), `stop_sweep` from another terminal, and `fetch_sweep` (a
sweep fetched from `storage.uri` alone, for `resume --storage`). The budget while it runs
is `sweeper.budget`'s.

The private modules: `_launch` (the recipes and their steps), `_trial` (`run_trial`, inside
each trial's process: a Ray Train `TorchTrainer`, in that process for one worker),
`_driver` (`SweepDriver`, the one Tune callback: Tune's events -> the book and its
listeners), `_janitor` (removes the adapters of trials that can no longer be the best),
`_watchdog` (says what a silent sweep waits on), `_sweep_dir` (the sweep
folder, its published files and its driver's pid), `_sweep_state` (what `sweep resume`
reads, checked first), `_from_storage`.
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "SweepRun", "run_sweep", "resume_sweep", "rebuild_sweep", "stop_sweep", "fetch_sweep",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "SweepRun": "_launch", "run_sweep": "_launch", "resume_sweep": "_launch", "rebuild_sweep": "_launch",
    "stop_sweep": "_sweep_dir",
    "fetch_sweep": "_from_storage",
}

__getattr__ = lazy_getattr(__name__, _HOME)
