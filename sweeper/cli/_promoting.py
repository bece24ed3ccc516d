"""Commands that take a trial out of a sweep: promote (to the MLflow Model Registry) and
export (as a YAML that trains it as one full run)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sweeper.cli._common import TRACKING_URI_HELP, TRIAL_HELP, console, store_at
from sweeper.errors import UserError


def promote(
    name: str = typer.Argument(..., help="Sweep name."),
    trial: Optional[str] = typer.Option(None, "--trial", help=TRIAL_HELP),
    model_name: Optional[str] = typer.Option(
        None, "--model-name", help="Registered model to add a version to (created if new); default: the sweep name."
    ),
    alias: str = typer.Option("champion", "--alias", help="Alias to point at the new version (moved if held)."),
    merge: bool = typer.Option(
        False, "--merge", help="Also log the adapter merged into the base: full weights that load without the base."
    ),
    force: bool = typer.Option(False, "--force", help="Promote a pruned, stopped or failed trial anyway."),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help=TRACKING_URI_HELP),
) -> None:
    """Register a trial (default: the best) in the MLflow Model Registry as a new version and set the alias."""
    from sweeper.promote import promote_trial

    result = promote_trial(
        store_at(tracking_uri), name, trial, model_name=model_name, alias=alias, merge=merge, force=force
    )
    trial_row = result.candidate.trial
    moved = f", moved from version {result.previous_version}" if result.previous_version else ""
    console.print(
        f"[green]registered[/green] {result.model_name} version {result.version} "
        f"(alias {result.alias!r}{moved}): sweep {name!r} trial {trial_row['trial_number']}, "
        f"{result.candidate.metric}={result.candidate.metric_text}{', merged weights' if result.merged else ''}",
        soft_wrap=True,
    )
    console.print(f"load it with mlflow.pyfunc.load_model({result.uri!r})", highlight=False, soft_wrap=True)


def export(
    name: str = typer.Argument(..., help="Sweep name."),
    trial: Optional[str] = typer.Option(None, "--trial", help=TRIAL_HELP),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="YAML file to write (default: print to stdout)."
    ),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help=TRACKING_URI_HELP),
) -> None:
    """Write a trial's config (default: the best trial's) as a YAML that trains it as one full run."""
    from sweeper.promote import export_trial

    text = export_trial(store_at(tracking_uri), name, trial)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        raise UserError(f"--output: cannot write {output}: {exc.strerror}") from None
    console.print(f"[green]wrote[/green] {output}: run it with `sweep start {output}`", highlight=False, soft_wrap=True)

