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


JSON_HELP = (
    "Print one JSON document on stdout instead of the text (schema: docs/reference/json.md); "
    "a refusal is JSON too, with the same exit status."
)
# Where a --json option records the command that asked for JSON (the context's `meta` is
# shared by the group and its command), so that the group prints a refusal as JSON too.
JSON_COMMAND = "sweeper.json_command"


def _wants_json(ctx: typer.Context, value: bool) -> bool:
    if value:
        ctx.meta[JSON_COMMAND] = ctx.info_name
    return value


def json_option():
    return typer.Option(False, "--json", help=JSON_HELP, callback=_wants_json)


SUMMARY_JSON_HELP = (
    "Also write the end-of-sweep summary to this file as one JSON object, whatever the outcome "
    "(schema: docs/reference/json.md)."
)


def summary_json_option():
    return typer.Option(None, "--summary-json", help=SUMMARY_JSON_HELP, dir_okay=False)


def check_summary_path(path: Optional[Path]) -> None:
    """Refuse --summary-json before the sweep starts where its folder does not exist."""
    if path is not None and not path.resolve().parent.is_dir():
        raise UserError(f"--summary-json: no folder {path.resolve().parent} to write {path.name} in; create it first")


TRIAL_HELP = "Trial number (as in `sweep status`) or Tune trial id; default: the sweep's best trial."


def finish_run(run, command: str = "start", summary_json: Optional[Path] = None) -> None:
    """Summary, then the exit status: 0 if a trial completed, 128 + the signal if stopped
    (130 for SIGINT and `sweep stop`, 143 for SIGTERM), else 1. With `summary_json`, the
    summary is also written there as JSON (sweeper.output) before the command ends."""
    from sweeper.track import print_summary

    print_summary(run, console)
    outcome, status, line = _ending(run)
    if summary_json is not None:  # a stop's line is the terminal's hint, not the summary's message
        _write_summary(summary_json, command, run, outcome, status, None if outcome == "stopped" else line)
    if outcome == "fault":  # the line says what to do, then `sweep resume`
        errors.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
        raise typer.Exit(status)
    if outcome == "stopped":
        console.print(line)
        raise typer.Exit(status)
    if outcome == "no_trial_completed":
        raise SweepFailed(line)


def _ending(run) -> tuple[str, int, Optional[str]]:
    """How the sweep ended (sweeper.output's `outcome`), its exit status and the line the
    terminal shows, in `how_it_ended`'s words (the notifications quote the same)."""
    from sweeper.track import how_it_ended

    ended, line = how_it_ended(run)
    if run.stopped_for:
        return "fault", 1, line
    if ended == "stopped":
        return "stopped", 128 + int(run.stop_signal), line
    if ended == "failed":
        return "no_trial_completed", SweepFailed.exit_code, line
    return "finished", 0, None


def _write_summary(path: Path, command: str, run, outcome: str, status: int, message: Optional[str]) -> None:
    """The summary as JSON at `path`; a file that cannot be written is a note, never the
    sweep's outcome."""
    from sweeper.output import summary_document

    try:
        path.write_text(summary_document(command, run, outcome, status, message) + "\n")
    except OSError as exc:
        errors.print(f"[yellow]note:[/yellow] --summary-json: cannot write {escape(str(path))}: {exc.strerror}",
                     highlight=False, soft_wrap=True)
