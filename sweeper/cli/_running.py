"""Commands that check, forecast, run, stop and continue a sweep on this machine or a
cluster it joins: validate, start, plan, resume, stop; and on the cluster as a Ray Job:
submit, logs (stop and resume take a dashboard address too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from sweeper.cli._common import (
    JOB_ADDRESS_HELP,
    SWEEP_DIR_HELP,
    check_summary_path,
    console,
    errors,
    finish_run,
    json_option,
    ray_address,
    summary_json_option,
    sweep_folder_and_spec,
)


VERBOSE_HELP = (
    "Show the libraries' own output too (Ray, Optuna, MLflow, transformers: notes, warnings, progress bars); "
    "without it they go to the sweep's driver.log."
)


def validate(file: Path = typer.Argument(..., help="Sweep YAML file."), as_json: bool = json_option()) -> None:
    """Check a sweep file without starting anything; every problem is listed (exit 2)."""
    from sweeper.cost import forecast_trial_memory
    from sweeper.plan import load_checked_spec
    from sweeper.search import read_warm_start
    from sweeper.spec import searched_paths, trials_text

    spec = load_checked_spec(file)
    notes = read_warm_start(spec).notes
    for note in notes:
        errors.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
    memory = forecast_trial_memory(spec) if spec.resources.use_gpu else None
    if as_json:
        from sweeper.output import validate_document

        typer.echo(validate_document(file, spec, trials_text(spec), searched_paths(spec), memory, notes))
        return
    console.print(
        f"[green]ok[/green] {file}: sweep {spec.name!r}, task {spec.task}, {trials_text(spec)} "
        f"over {', '.join(searched_paths(spec))}"
    )
    if memory is not None:
        console.print(escape(memory.describe()), highlight=False)


def start(
    file: Path = typer.Argument(..., help="Sweep YAML file."),
    address: Optional[str] = typer.Option(
        None, "--address", help="Ray cluster to join (default: RAY_ADDRESS, else a new local cluster)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing sweep of the same name."),
    verbose: bool = typer.Option(False, "--verbose", help=VERBOSE_HELP),
    summary_json: Optional[Path] = summary_json_option(),
) -> None:
    """Validate FILE, then run the sweep: a live table while it runs, a summary at the end."""
    from sweeper.cluster import cluster_address
    from sweeper.driver_log import DriverLog
    from sweeper.plan import load_checked_spec
    from sweeper.run import run_sweep

    check_summary_path(summary_json)
    spec = load_checked_spec(file)
    with DriverLog(verbose):
        run = run_sweep(
            spec,
            yaml_folder=file.resolve().parent,
            address=cluster_address(address, os.environ),
            overwrite=overwrite,
            console=console,
        )
    finish_run(run, "start", summary_json)


def plan(
    file: Path = typer.Argument(..., help="Sweep YAML file."),
    address: Optional[str] = typer.Option(
        None, "--address", help="Ray cluster to size and calibrate on (default: this machine, as a local cluster)."
    ),
    calibrate: bool = typer.Option(
        True, "--calibrate/--no-calibrate",
        help="Measure the step and evaluation time (a few steps, on the cluster); or use the throughput model.",
    ),
    as_json: bool = json_option(),
) -> None:
    """Validate FILE and forecast the sweep without running it: step budget by rung, step
    time, expected and worst-case wall time, accelerator-hours and USD, budget caps."""
    from sweeper.plan import load_checked_spec, plan_sweep
    from sweeper.search import read_warm_start

    spec = load_checked_spec(file)
    read_warm_start(spec)  # as `sweep start` reads it: an earlier sweep it cannot read is the same keyed line
    # With --json the terminal's lines go to stderr and stdout holds the document alone.
    forecast = plan_sweep(spec, file, address=ray_address(address), calibrate=calibrate,
                          console=errors if as_json else console)
    if as_json:
        from sweeper.output import plan_document
        from sweeper.spec import trials_text

        typer.echo(plan_document(file, spec, forecast, trials_text(spec)))


def resume(
    name: str = typer.Argument(..., help="Sweep name."),
    sweep_dir: Optional[Path] = typer.Option(None, "--sweep-dir", help=SWEEP_DIR_HELP),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to join (default: RAY_ADDRESS, else a new local cluster)."),
    storage_uri: Optional[str] = typer.Option(
        None, "--storage", help="The sweep's storage.uri, where its folder is gone (another machine or folder): "
        "its sweep.yaml and Optuna study are fetched from there into --sweep-dir (default ./sweeps/NAME).",
    ),
    rebuild: bool = typer.Option(
        False, "--rebuild", help="Tune's state is lost or unreadable: rebuild the sweep from its MLflow runs and Optuna "
        "study (finished trials kept, unfinished ones started again from step 0).",
    ),
    verbose: bool = typer.Option(False, "--verbose", help=VERBOSE_HELP),
    summary_json: Optional[Path] = summary_json_option(),
) -> None:
    """Continue a sweep after its driver died or was stopped: finished trials are kept,
    unfinished ones continue from their latest checkpoint, the search keeps its history."""
    from sweeper.cluster import cluster_address
    from sweeper.driver_log import DriverLog
    from sweeper.run import resume_sweep

    check_summary_path(summary_json)
    if address and address.startswith(("http://", "https://")):
        from sweeper.cluster import jobs

        job = jobs.resume(name, address, Path.cwd())
        console.print(f"Submitted the resume of sweep {name!r} as job {job.job_id}\nDashboard: {job.dashboard_url}", highlight=False)
        return
    if storage_uri:
        from sweeper.run import fetch_sweep

        fetched = fetch_sweep(name, storage_uri, sweep_dir or Path("sweeps") / name)
        for note in fetched.notes:
            errors.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
        sweep_dir = fetched.folder
    folder, _ = sweep_folder_and_spec(name, sweep_dir)
    from sweeper.run import rebuild_sweep

    go_on = rebuild_sweep if rebuild else resume_sweep
    with DriverLog(verbose):
        run = go_on(folder, address=cluster_address(address, os.environ), console=console)
    finish_run(run, "resume", summary_json)


def stop(
    name: str = typer.Argument(..., help="Sweep name."),
    sweep_dir: Optional[Path] = typer.Option(None, "--sweep-dir", help=SWEEP_DIR_HELP),
    timeout: float = typer.Option(300, "--timeout", help="Seconds to wait for the driver to finish stopping."),
    address: Optional[str] = typer.Option(None, "--address", help="For a submitted sweep: " + JOB_ADDRESS_HELP),
) -> None:
    """Stop a running sweep from another terminal: running trials stop gracefully, their
    MLflow runs are marked killed, and the sweep stays resumable (sweep resume NAME)."""
    from sweeper.run import stop_sweep

    if address and address.startswith(("http://", "https://")):
        from sweeper.cluster import jobs

        console.print(f"Stopped job {jobs.stop(name, address)} of sweep {name!r}; continue it with: sweep resume {name} --address {address}")
        return
    _, spec = sweep_folder_and_spec(name, sweep_dir)
    pid = stop_sweep(spec, timeout_s=timeout)
    console.print(f"Sweep {name!r} stopped (driver pid {pid}); continue it with: sweep resume {name}")


def submit(
    file: Path = typer.Argument(..., help="Sweep YAML file, inside this folder (it travels to the cluster with its data)."),
    address: Optional[str] = typer.Option(None, "--address", help=JOB_ADDRESS_HELP),
) -> None:
    """Run the sweep on the cluster as a Ray Job: the driver lives there, not here."""
    from sweeper.cluster import jobs

    name, sweep_dir, storage_uri = jobs.submitted_sweep(file)
    here = Path.cwd()
    address = ray_address(address)
    job = jobs.submit(name, (sweep_dir, storage_uri), "start", [jobs.working_dir_path(file, here)], address, here)
    console.print(f"Submitted sweep {name!r} as job {job.job_id}", highlight=False)
    console.print(f"Dashboard: {job.dashboard_url}", highlight=False, soft_wrap=True)
    console.print(f"Follow it with: sweep logs {name} --address {address}", highlight=False, soft_wrap=True)


def logs(
    name: str = typer.Argument(..., help="Sweep name."),
    address: Optional[str] = typer.Option(None, "--address", help=JOB_ADDRESS_HELP),
) -> None:
    """Follow the output of a submitted sweep's latest job until it ends."""
    from sweeper.cluster import jobs

    status = jobs.follow_logs(name, ray_address(address), lambda text: typer.echo(text, nl=False))
    console.print(f"Job of sweep {name!r}: {status}", highlight=False)
