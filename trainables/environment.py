"""Where sweeper keeps its cache, and the environment variables a trial's processes read.
Standard library only."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CACHE_ROOT", "PREEMPTION_WATCHER_ENV"]

# What sweeper keeps between sweeps on this machine: tokenized data, built-in models, machine profiles.
CACHE_ROOT = Path.home() / ".cache" / "sweeper"

# Ray Train's switch for its watcher of node drains (on in Ray, off for a sweep on its own
# machine: sweeper/cluster/_connect.py); the workers ask for a preemption notice only where
# it is on (trainables/preemption.py).
PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"
