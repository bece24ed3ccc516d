"""The sweep's Optuna study: its file and storage URL, a consistent copy of it, and every
key the search writes into it or reads out of it, and `sweep dashboard NAME`:
optuna-dashboard on it. Every evaluation of every trial is in the study at its training
step (sweeper/search/_searcher.py), so pruned trials, and trials paused at a rung, show
their intermediate values beside the completed ones.

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
import socket
import sqlite3
from contextlib import closing
from pathlib import Path

from sweeper.errors import UserError
from trainables.metrics import STEP

__all__ = [
    "STUDY_FILE", "study_file", "study_url", "file_of_study_url", "copy_study",
    "TIME_ATTR", "TUNE_TRIAL_ID_ATTR", "STARTUP_ATTR", "WARM_START_ATTR", "REPEAT_ATTR", "StudyDashboard", "study_dashboard", "serve"]

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


class StudyDashboard:
    """Where a sweep's study is and the address the dashboard will serve it at."""

    def __init__(self, name: str, sweep_dir: Path, host: str, port: int, study_id: int):
        self.name, self.sweep_dir, self.host, self.port, self.study_id = name, sweep_dir, host, port, study_id

    @property
    def storage_url(self) -> str:
        return study_url(self.sweep_dir)

    @property
    def url(self) -> str:
        """The study's page (the dashboard's own start page lists every study)."""
        return f"http://{self.host}:{self.port}/dashboard/studies/{self.study_id}"


def study_dashboard(name: str, sweep_dir: Path, host: str = "127.0.0.1", port: int = 8080) -> StudyDashboard:
    """Check that the sweep has a study and the port is free; UserError (keyed NAME,
    --sweep-dir or --port) otherwise."""
    import optuna

    path = study_file(sweep_dir)
    if not path.is_file():
        raise UserError(
            f"NAME: sweep {name!r} has no Optuna study at {path} (a sweep without search.parameters has "
            "none); give --sweep-dir or check the name"
        )
    storage = optuna.storages.RDBStorage(study_url(sweep_dir))
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        names = ", ".join(s.study_name for s in storage.get_all_studies()) or "none"
        raise UserError(f"NAME: the study file {path} holds no study {name!r}; it holds: {names}") from None
    finally:
        storage.remove_session()
    _check_port_free(host, port)
    return StudyDashboard(name, sweep_dir, host, port, study_id)


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UserError(f"--port: cannot listen on {host}:{port} ({exc.strerror}); give a free port") from None


def serve(dashboard: StudyDashboard) -> None:
    """Serve optuna-dashboard on `dashboard`'s study until interrupted (Ctrl-C)."""
    import optuna_dashboard

    optuna_dashboard.run_server(dashboard.storage_url, host=dashboard.host, port=dashboard.port)
