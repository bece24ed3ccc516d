"""What the command modules share: the two consoles, the help texts of options several
commands take, and the settings resolved once at the CLI's edge (the Ray address, the
MLflow store, a sweep's folder) before they are passed down."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from sweeper.errors import SweepFailed, UserError

console = Console()
errors = Console(stderr=True)


def ray_address(address: Optional[str]) -> Optional[str]:
    """--address, else RAY_ADDRESS: read here, at the CLI's edge, and passed down."""
    return address or os.environ.get("RAY_ADDRESS")


SWEEP_DIR_HELP = "The sweep's folder (default ./sweeps/NAME)."

JOB_ADDRESS_HELP = "The cluster's dashboard, http://HEAD:8265 (default: RAY_ADDRESS)."


def sweep_folder_and_spec(name: str, sweep_dir: Optional[Path]):
    from sweeper.spec import load_spec

    folder = (sweep_dir or Path("sweeps") / name).resolve()
    if not (folder / "sweep.yaml").is_file():
        raise UserError(f"NAME: no sweep {name!r} at {folder} (no sweep.yaml); give --sweep-dir or check the name")
    return folder, load_spec(folder / "sweep.yaml")


TRACKING_URI_HELP = "MLflow tracking URI (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)."


def store_at(tracking_uri: str | None):
    from sweeper.track import resolve_tracking_uri, SweepStore

    return SweepStore(resolve_tracking_uri(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")))


TRIAL_HELP = "Trial number (as in `sweep status`) or Tune trial id; default: the sweep's best trial."


def finish_run(run) -> None:
    """Summary, then the exit status: 0 if a trial completed, 128 + the signal if stopped
    (130 for SIGINT and `sweep stop`, 143 for SIGTERM), else 1."""
    from sweeper.track import how_it_ended, print_summary

    print_summary(run, console)
    ended, line = how_it_ended(run)
    if run.stopped_for:  # a fault stopped it: the line says what to do, then `sweep resume`
        errors.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if ended == "stopped":
        console.print(line)
        raise typer.Exit(128 + int(run.stop_signal))
    if ended == "failed":  # no trial completed
        raise SweepFailed(line)

