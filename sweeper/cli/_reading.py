"""Read-only commands: the schema's reference, the sweeps and trials in the MLflow store,
reports, and optuna-dashboard on a sweep's study. None of them loads Ray or torch."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sweeper.cli._common import SWEEP_DIR_HELP, TRACKING_URI_HELP, console, errors, json_option, store_at
from sweeper.errors import UserError


def reference() -> None:
    """Print the YAML reference (every key, its type, default and meaning) as Markdown."""
    from sweeper.spec import markdown_reference

    typer.echo(markdown_reference(), nl=False)


def dashboard(
    name: str = typer.Argument(..., help="Sweep name."),
    sweep_dir: Optional[Path] = typer.Option(None, "--sweep-dir", help=SWEEP_DIR_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8080, "--port", help="Port to listen on."),
) -> None:
    """Serve optuna-dashboard on the sweep's Optuna study (every trial, pruned and paused
    ones with their evaluations by training step) until Ctrl-C; prints its URL."""
    from sweeper.search import serve, study_dashboard

    folder = (sweep_dir or Path("sweeps") / name).resolve()
    board = study_dashboard(name, folder, host=host, port=port)
    console.print(f"optuna-dashboard for sweep {name!r}: {board.url}  (Ctrl-C stops it)", highlight=False, soft_wrap=True)
    try:
        serve(board)
    except KeyboardInterrupt:
        pass


def list_sweeps(
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help=TRACKING_URI_HELP),
    as_json: bool = json_option(),
) -> None:
    """Sweeps in the MLflow store: status, trials, best metric, cost (works while they run)."""
    from sweeper.views import sweeps_table

    sweeps = store_at(tracking_uri).sweeps()
    if as_json:
        from sweeper.output import list_document

        typer.echo(list_document(sweeps))
        return
    console.print(sweeps_table(sweeps))


def status(
    name: str = typer.Argument(..., help="Sweep name."),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help=TRACKING_URI_HELP),
    show_all: bool = typer.Option(
        False, "--all", help="Every trial, also in a sweep of more than 50 (by default: the running ones and the 20 best)."
    ),
    as_json: bool = json_option(),
) -> None:
    """The trial table of sweep NAME from the MLflow store (works while it runs)."""
    from sweeper.confirm import confirmation_lines, confirmation_table, from_trials
    from sweeper.names import Tag
    from sweeper.search import study_front
    from sweeper.views import front_table, trials_shown, trials_table

    store = store_at(tracking_uri)
    run = store.sweep_run(name)
    trials = store.trials(run=run)
    # search.objectives: the Pareto front, from the study in the sweep folder (none for a
    # sweep of one objective or a folder not on this machine).
    sweep_dir = run.data.tags.get(Tag.SWEEP_DIR)
    front = study_front(sweep_dir, run.data.tags.get(Tag.SWEEP_NAME)) if sweep_dir else None
    if as_json:  # every trial, whatever --all says
        from sweeper.output import status_document

        typer.echo(status_document(run, trials, front))
        return
    shown, note = trials_shown(run, trials, show_all)
    console.print(trials_table(run, shown))
    if front is not None:
        console.print(front_table(front, trials))
    confirmation = from_trials(trials, run.data.tags.get(Tag.METRIC, "eval_loss"), run.data.tags.get(Tag.GOAL, "minimize"))
    if confirmation is not None:  # search.confirm: the best configs again over new seeds
        console.print(confirmation_table(confirmation))
        for line in confirmation_lines(confirmation):
            console.print(line, highlight=False, soft_wrap=True)
    if note:
        console.print(note, highlight=False, soft_wrap=True)


def report(
    names: list[str] = typer.Argument(..., metavar="NAME", help="Sweep name(s); several are compared side by side."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Folder for index.html, report.md and plots/ (default: ./sweep-reports/<names>)."
    ),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help=TRACKING_URI_HELP),
) -> None:
    """Report on sweep NAME (or compare several): a self-contained index.html, report.md for a
    pull request, and a summary table here."""
    from reports import make_report

    store = store_at(tracking_uri)
    folder = out or Path("sweep-reports") / "_vs_".join(dict.fromkeys(names))
    written = make_report(store, names, folder, console)
    console.print(f"Report: {written.html.resolve()}")
    console.print(f"Markdown: {written.markdown.resolve()}" + (f" ({len(written.images)} plots in plots/)" if written.images else ""))
    if written.images_note:
        errors.print(f"[yellow]note:[/yellow] {written.images_note}", highlight=False, soft_wrap=True)
    empty = [sweep.name for sweep in written.report.sweeps if not sweep.has_completed_trial]
    if empty:
        raise UserError(*(
            f"NAME: sweep {name!r} has no completed trial; the report in {folder} shows what exists" for name in empty
        ))

