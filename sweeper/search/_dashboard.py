"""`sweep dashboard NAME`: optuna-dashboard on the sweep's Optuna study (`optuna.db` in
the sweep's folder). Every evaluation of every trial is in the study at its training step
(sweeper/search/_searcher.py), so pruned trials, and trials paused at a rung, show their
intermediate values beside the completed ones.

Imports neither Ray nor torch."""

from __future__ import annotations

import socket
from pathlib import Path

from sweeper.errors import UserError
from sweeper.search._study import study_file, study_url

__all__ = ["StudyDashboard", "study_dashboard", "serve"]


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
