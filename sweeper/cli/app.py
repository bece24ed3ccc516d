"""The `sweep` command. Each subcommand parses its arguments and calls one module; the
group (`SweepCommands`) turns the errors a user can fix into keyed one-line messages and
an exit status, once for all subcommands (tracebacks with --debug)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from sweeper.errors import SweepFailed, UserError
from sweeper.names import TrialState
from trainables.errors import InputError

console = Console()
errors = Console(stderr=True)

# What a command may raise on purpose, and the exit status it ends with. Each is printed
# as its one-line messages (`lines`, else the message); anything else is a bug and keeps
# its traceback. --debug shows the traceback of these too.
# UserError (the service's) is an InputError (the trial's: data, model folders, tokenizers).
EXIT_STATUS: dict[type[Exception], int] = {InputError: InputError.exit_code, SweepFailed: SweepFailed.exit_code}


class SweepCommands(TyperGroup):
    """The `sweep` group: maps the errors of every subcommand to messages, in one place."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except tuple(EXIT_STATUS) as exc:
            if ctx.params.get("debug"):
                raise
            for line in getattr(exc, "lines", None) or [str(exc)]:
                # Escaped: a line quotes user input, which may hold brackets.
                errors.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
            raise typer.Exit(_exit_status(exc)) from None


def _exit_status(exc: Exception) -> int:
    return next(status for kind, status in EXIT_STATUS.items() if isinstance(exc, kind))


app = typer.Typer(
    cls=SweepCommands,
    help="Hyperparameter sweeps for LLM fine-tuning: one YAML file, Ray Tune + Optuna + ASHA.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")) -> None:
    # MLflow's artifact download bars would interleave with this command's own output.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


@app.command()
def validate(file: Path = typer.Argument(..., help="Sweep YAML file.")) -> None:
    """Check a sweep file without starting anything; every problem is listed (exit 2)."""
    from sweeper.search.warm_start import read_warm_start
    from sweeper.cost.memory import gpu_memory_gib, refuse_if_unfit
    from sweeper.plan.checks import load_checked_spec

    spec = load_checked_spec(file)
    for note in read_warm_start(spec).notes:
        errors.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
    memory = refuse_if_unfit(spec, gpu_memory_gib(spec.cost.accelerator))
    console.print(
        f"[green]ok[/green] {file}: sweep {spec.name!r}, task {spec.task}, {spec.search.num_trials} trials "
        f"over {', '.join(spec.search.parameters)}"
    )
    if memory is not None and spec.resources.use_gpu:
        console.print(escape(memory.describe()), highlight=False)


@app.command()
def reference() -> None:
    """Print the YAML reference (every key, its type, default and meaning) as Markdown."""
    from sweeper.spec.reference import markdown_reference

    typer.echo(markdown_reference(), nl=False)


@app.command()
def start(
    file: Path = typer.Argument(..., help="Sweep YAML file."),
    address: Optional[str] = typer.Option(
        None, "--address", help="Ray cluster to join (default: RAY_ADDRESS, else a new local cluster)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing sweep of the same name."),
) -> None:
    """Validate FILE, then run the sweep: a live table while it runs, a summary at the end."""
    from sweeper.cluster.connect import cluster_address
    from sweeper.plan.checks import load_checked_spec
    from sweeper.run.launch import run_sweep

    spec = load_checked_spec(file)
    run = run_sweep(
        spec,
        yaml_folder=file.resolve().parent,
        address=cluster_address(address, os.environ),
        overwrite=overwrite,
        console=console,
    )
    _finish(run)


@app.command()
def plan(
    file: Path = typer.Argument(..., help="Sweep YAML file."),
    address: Optional[str] = typer.Option(
        None, "--address", help="Ray cluster to size and calibrate on (default: this machine, as a local cluster)."
    ),
    calibrate: bool = typer.Option(
        True, "--calibrate/--no-calibrate", help="Measure the step time (a few steps) or use the throughput model."
    ),
) -> None:
    """Validate FILE and forecast the sweep without running it: step budget by rung, step
    time, expected and worst-case wall time, accelerator-hours and USD, budget caps."""
    from sweeper.plan.command import plan_sweep

    plan_sweep(file, address=_ray_address(address), calibrate=calibrate, console=console)


def _finish(run) -> None:
    """Summary, then the exit status: 0 if a trial completed, 130 if stopped, else 1."""
    from sweeper.track.summary import print_summary

    print_summary(run, console)
    if run.interrupted:
        console.print(f"Sweep stopped; continue it with: sweep resume {run.spec.name}")
        raise typer.Exit(130)
    if run.book.count(TrialState.COMPLETED) == 0:
        failed = [t.status_text for t in run.book.trials.values() if t.state == TrialState.FAILED]
        reason = f"; first failure: {failed[0]}" if failed else ""
        raise SweepFailed(f"no trial completed ({len(run.book.trials)} started){reason}")


def _ray_address(address: Optional[str]) -> Optional[str]:
    """--address, else RAY_ADDRESS: read here, at the CLI's edge, and passed down."""
    return address or os.environ.get("RAY_ADDRESS")


SWEEP_DIR_HELP = "The sweep's folder (default ./sweeps/NAME)."
JOB_ADDRESS_HELP = "The cluster's dashboard, http://HEAD:8265 (default: RAY_ADDRESS)."


def _sweep_spec(name: str, sweep_dir: Optional[Path]):
    from sweeper.spec.load import load_spec

    folder = (sweep_dir or Path("sweeps") / name).resolve()
    if not (folder / "sweep.yaml").is_file():
        raise UserError(f"NAME: no sweep {name!r} at {folder} (no sweep.yaml); give --sweep-dir or check the name")
    return folder, load_spec(folder / "sweep.yaml")


@app.command()
def resume(
    name: str = typer.Argument(..., help="Sweep name."),
    sweep_dir: Optional[Path] = typer.Option(None, "--sweep-dir", help=SWEEP_DIR_HELP),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to join (default: RAY_ADDRESS, else a new local cluster)."),
    storage_uri: Optional[str] = typer.Option(
        None, "--storage", help="The sweep's storage.uri, where its folder is gone (another machine or folder): "
        "its sweep.yaml and Optuna study are fetched from there into --sweep-dir (default ./sweeps/NAME).",
    ),
) -> None:
    """Continue a sweep after its driver died or was stopped: finished trials are kept,
    unfinished ones continue from their latest checkpoint, the search keeps its history."""
    from sweeper.cluster.connect import cluster_address
    from sweeper.run.launch import resume_sweep

    if address and address.startswith(("http://", "https://")):
        from sweeper.cluster import jobs

        job = jobs.resume(name, address, Path.cwd())
        console.print(f"Submitted the resume of sweep {name!r} as job {job.job_id}\nDashboard: {job.dashboard_url}", highlight=False)
        return
    if storage_uri:
        from sweeper.run.from_storage import fetch_sweep

        fetched = fetch_sweep(name, storage_uri, sweep_dir or Path("sweeps") / name)
        for note in fetched.notes:
            errors.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
        sweep_dir = fetched.folder
    folder, _ = _sweep_spec(name, sweep_dir)
    _finish(resume_sweep(folder, address=cluster_address(address, os.environ), console=console))


@app.command()
def stop(
    name: str = typer.Argument(..., help="Sweep name."),
    sweep_dir: Optional[Path] = typer.Option(None, "--sweep-dir", help=SWEEP_DIR_HELP),
    timeout: float = typer.Option(300, "--timeout", help="Seconds to wait for the driver to finish stopping."),
    address: Optional[str] = typer.Option(None, "--address", help="For a submitted sweep: " + JOB_ADDRESS_HELP),
) -> None:
    """Stop a running sweep from another terminal: running trials stop gracefully, their
    MLflow runs are marked killed, and the sweep stays resumable (sweep resume NAME)."""
    from sweeper.run.sweep_dir import stop_sweep

    if address and address.startswith(("http://", "https://")):
        from sweeper.cluster import jobs

        console.print(f"Stopped job {jobs.stop(name, address)} of sweep {name!r}; continue it with: sweep resume {name} --address {address}")
        return
    _, spec = _sweep_spec(name, sweep_dir)
    pid = stop_sweep(spec, timeout_s=timeout)
    console.print(f"Sweep {name!r} stopped (driver pid {pid}); continue it with: sweep resume {name}")


@app.command()
def dashboard(
    name: str = typer.Argument(..., help="Sweep name."),
    sweep_dir: Optional[Path] = typer.Option(None, "--sweep-dir", help=SWEEP_DIR_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8080, "--port", help="Port to listen on."),
) -> None:
    """Serve optuna-dashboard on the sweep's Optuna study (every trial, pruned and paused
    ones with their evaluations by training step) until Ctrl-C; prints its URL."""
    from sweeper.search.dashboard import serve, study_dashboard

    folder = (sweep_dir or Path("sweeps") / name).resolve()
    board = study_dashboard(name, folder, host=host, port=port)
    console.print(f"optuna-dashboard for sweep {name!r}: {board.url}  (Ctrl-C stops it)", highlight=False, soft_wrap=True)
    try:
        serve(board)
    except KeyboardInterrupt:
        pass


@app.command()
def submit(
    file: Path = typer.Argument(..., help="Sweep YAML file, inside this folder (it travels to the cluster with its data)."),
    address: Optional[str] = typer.Option(None, "--address", help=JOB_ADDRESS_HELP),
) -> None:
    """Run the sweep on the cluster as a Ray Job: the driver lives there, not here."""
    from sweeper.cluster import jobs

    name, sweep_dir, storage_uri = jobs.submitted_sweep(file)
    here = Path.cwd()
    address = _ray_address(address)
    job = jobs.submit(name, (sweep_dir, storage_uri), "start", [jobs.working_dir_path(file, here)], address, here)
    console.print(f"Submitted sweep {name!r} as job {job.job_id}", highlight=False)
    console.print(f"Dashboard: {job.dashboard_url}", highlight=False, soft_wrap=True)
    console.print(f"Follow it with: sweep logs {name} --address {address}", highlight=False, soft_wrap=True)


@app.command()
def logs(
    name: str = typer.Argument(..., help="Sweep name."),
    address: Optional[str] = typer.Option(None, "--address", help=JOB_ADDRESS_HELP),
) -> None:
    """Follow the output of a submitted sweep's latest job until it ends."""
    from sweeper.cluster import jobs

    status = jobs.follow_logs(name, _ray_address(address), lambda text: typer.echo(text, nl=False))
    console.print(f"Job of sweep {name!r}: {status}", highlight=False)


TRACKING_URI_HELP = "MLflow tracking URI (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)."


def _store(tracking_uri: str | None):
    from sweeper.track.store import SweepStore
    from sweeper.track.mlflow_store import resolve_tracking_uri

    return SweepStore(resolve_tracking_uri(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")))


@app.command("list")
def list_sweeps(tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help=TRACKING_URI_HELP)) -> None:
    """Sweeps in the MLflow store: status, trials, best metric, cost (works while they run)."""
    from sweeper.views import sweeps_table

    console.print(sweeps_table(_store(tracking_uri).sweeps()))


@app.command()
def status(
    name: str = typer.Argument(..., help="Sweep name."),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help=TRACKING_URI_HELP),
) -> None:
    """The trial table of sweep NAME from the MLflow store (works while it runs)."""
    from sweeper.views import trials_table

    store = _store(tracking_uri)
    run = store.sweep_run(name)
    console.print(trials_table(run, store.trials(run=run)))


TRIAL_HELP = "Trial number (as in `sweep status`) or Tune trial id; default: the sweep's best trial."


@app.command()
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
    from sweeper.promote.registry import promote_trial

    result = promote_trial(
        _store(tracking_uri), name, trial, model_name=model_name, alias=alias, merge=merge, force=force
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


@app.command()
def export(
    name: str = typer.Argument(..., help="Sweep name."),
    trial: Optional[str] = typer.Option(None, "--trial", help=TRIAL_HELP),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="YAML file to write (default: print to stdout)."
    ),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help=TRACKING_URI_HELP),
) -> None:
    """Write a trial's config (default: the best trial's) as a YAML that trains it as one full run."""
    from sweeper.promote.export import export_trial

    text = export_trial(_store(tracking_uri), name, trial)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        raise UserError(f"--output: cannot write {output}: {exc.strerror}") from None
    console.print(f"[green]wrote[/green] {output}: run it with `sweep start {output}`", highlight=False, soft_wrap=True)
@app.command()
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

    # best_config.yaml is one small file: no download progress bar on the terminal.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    store = _store(tracking_uri)
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


if __name__ == "__main__":
    sys.exit(app())
