"""Environment variables that tell a trial's processes how they were started. Standard
library only: `python -m sweeper.cluster.fork_server`, which starts every worker process of a
local sweep, imports this and must stay light."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CACHE_ROOT", "WARM_STARTED_ENV", "PREEMPTION_WATCHER_ENV"]

# What sweeper keeps between sweeps on this machine: tokenized data, machine profiles, an
# empty MLflow store of the installed version.
CACHE_ROOT = Path.home() / ".cache" / "sweeper"

# "1" in every process forked from the warm-start server (sweeper/cluster/fork_server.py); the
# first report of a trial says whether its workers were (trainables/worker.py).
WARM_STARTED_ENV = "SWEEPER_WARM_STARTED"

# Ray Train's switch for its watcher of node drains (on in Ray, off for a sweep on its own
# machine: sweeper/cluster/connect.py); the workers ask for a preemption notice only where
# it is on (trainables/preemption.py).
PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"
