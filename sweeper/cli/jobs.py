"""Commands for a sweep that runs on the cluster as a Ray Job: submit, logs (stop and
resume take a dashboard address too: sweeper/cli/running.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sweeper.cli.common import JOB_ADDRESS_HELP, console, ray_address


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

