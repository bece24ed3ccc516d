"""The sweep's Optuna study: its file and storage URL, a consistent copy of it, and every
key the search writes into it or reads out of it.

The searcher (sweeper/search/_searcher.py) marks each Optuna trial with user attributes:
the Tune trial it was asked for, a startup trial, and for a seeded trial where its config
came from and whether it repeats an earlier run (sweeper/search/_warm_start.py). The
searcher keeps those marks in memory for the driver; the study is their durable copy, from
which a resumed sweep rebuilds them.

Imports neither Ray, torch nor Optuna: `sweep validate`, `sweep dashboard` and
`sweep resume --storage` use it.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

from trainables.metrics import STEP

__all__ = [
    "STUDY_FILE", "study_file", "study_url", "file_of_study_url", "copy_study",
    "TIME_ATTR", "TUNE_TRIAL_ID_ATTR", "STARTUP_ATTR", "WARM_START_ATTR", "REPEAT_ATTR",
]

# The study's SQLite file: in the sweep folder, and a copy with each of Tune's experiment
# checkpoints in storage.uri's tune/ (`StepAwareOptunaSearch.save_to_dir`).
STUDY_FILE = "optuna.db"

# The result key of a report's training step: Tune's time attribute for the schedulers,
# and the step at which the searcher gives Optuna the report's value as an intermediate
# value (Optuna's own step would be Tune's `training_iteration`).
TIME_ATTR = STEP

# The Optuna trial's user attribute naming the Tune trial it was asked for: it maps Tune
# trials to Optuna trials again after `sweep resume`, and a seeded trial to the run it
# became.
TUNE_TRIAL_ID_ATTR = "tune_trial_id"
# The user attribute of one of the sweep's first `early_stopping.startup_trials` trials,
# which train to max_steps unranked (sweeper/search/_asha.py).
STARTUP_ATTR = "startup_trial"
# The user attribute of a seeded trial (added as history or enqueued): where it came
# from, "<earlier sweep>/<its Tune trial id>".
WARM_START_ATTR = "warm_start_source"
# The user attribute of an enqueued config that repeats a completed earlier run (it goes
# on unranked, as a startup trial does).
REPEAT_ATTR = "warm_start_repeat"


def study_file(sweep_dir: Path) -> Path:
    """The study's file in the sweep folder `sweep_dir`."""
    return Path(sweep_dir) / STUDY_FILE


def study_url(sweep_dir: Path) -> str:
    """The Optuna storage URL of the study in the sweep folder `sweep_dir`."""
    return f"sqlite:///{study_file(sweep_dir)}"


def file_of_study_url(url: str) -> Path:
    """The SQLite file a `study_url` names."""
    return Path(url.removeprefix("sqlite:///"))


def copy_study(source: Path, target: Path) -> None:
    """Copy the SQLite study at `source` to `target` with SQLite's online backup, which
    never copies half a write, and put it in place in one step (Tune may be uploading
    the previous copy)."""
    partial = target.with_name(f".{target.name}.partial")
    with closing(sqlite3.connect(source)) as reading, closing(sqlite3.connect(partial)) as writing:
        reading.backup(writing)
    os.replace(partial, target)
