"""The Python API, for notebooks and scripts: what `sweep start`, `sweep list`,
`sweep status` and `sweep report` do, with the same defaults, returning objects and
polars frames instead of printing.

    import sweeper
    run = sweeper.start("search_spaces/quickstart.yaml")   # a SweepRun
    sweeper.status("quickstart")                           # one row per trial
    sweeper.report("quickstart").leaderboard               # ranked trials

Errors a user can fix are raised as `sweeper.errors.UserError` (an exception whose
`lines` are the keyed one-line messages the CLI prints). Importing this module imports
neither Ray nor torch; `start` does, when it runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from rich.console import Console

    from reports.build import Report
    from sweeper.run import SweepRun
    from sweeper.spec import SweepSpec
    from sweeper.track import SweepStore

__all__ = ["start", "sweeps", "status", "report", "SweepReportFiles"]


def start(
    spec: str | Path | dict[str, Any] | SweepSpec,
    *,
    address: str | None = None,
    overwrite: bool = False,
    console: Console | None = None,
    verbose: bool = False,
) -> SweepRun:
    """Run a sweep to its end, as `sweep start` does, and return its `SweepRun` (spec,
    plan, book of trials, cost, dashboard URL; `interrupted` after a stop).

    Args:
        spec: a sweep YAML file, its mapping (relative paths resolve against the working
            directory), or a validated `SweepSpec`.
        address: the Ray cluster to join; default RAY_ADDRESS, else a new local cluster.
        overwrite: replace an existing sweep of the same name.
        console: where the live table and the closing summary go (a rich Console);
            default the terminal or notebook output.
        verbose: show the libraries' own output (Ray, Optuna, MLflow, transformers) too;
            it always goes to the sweep's driver.log.

    Raises:
        UserError: the spec is invalid, the sweep exists, the store or cluster cannot
            be used. A sweep in which no trial completed is returned, not raised: read
            `run.book`.
    """
    from rich.console import Console

    from sweeper.cluster import cluster_address, stop_local_cluster
    from sweeper.driver_log import DriverLog
    from sweeper.plan import check_spec
    from sweeper.run import run_sweep
    from sweeper.track import print_summary

    resolved, yaml_folder = _resolve_spec(spec)
    check_spec(resolved)
    console = console or Console()
    import ray

    # As the CLI: each sweep its own Ray job (named after it, with its metadata) on the
    # cluster, so a Ray this call started ends with the sweep.
    started_ray = not ray.is_initialized()
    try:
        with DriverLog(verbose):  # the libraries' own output to the sweep's driver.log
            run = run_sweep(
                resolved,
                yaml_folder=yaml_folder,
                address=cluster_address(address, os.environ),
                overwrite=overwrite,
                console=console,
            )
    finally:
        if started_ray:
            stop_local_cluster()
    print_summary(run, console)
    return run


def _resolve_spec(spec) -> tuple[SweepSpec, Path]:
    """The validated spec and the folder its relative paths (and git commit) come from."""
    from sweeper.spec import SweepSpec, load_spec, validate_spec

    if isinstance(spec, SweepSpec):
        return spec, Path.cwd()
    if isinstance(spec, dict):
        return validate_spec(spec, base_dir=Path.cwd()), Path.cwd()
    path = Path(spec)
    return load_spec(path), path.resolve().parent


def store(tracking_uri: str | None = None) -> SweepStore:
    """The MLflow store the CLI's read commands use: `tracking_uri`, else
    MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory."""
    from sweeper.track import resolve_tracking_uri, SweepStore

    return SweepStore(resolve_tracking_uri(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")))


def sweeps(tracking_uri: str | None = None) -> pl.DataFrame:
    """What `sweep list` shows: one row per sweep in the store (newest first)."""
    return store(tracking_uri).sweeps()


def status(name: str, tracking_uri: str | None = None) -> pl.DataFrame:
    """What `sweep status NAME` shows, as a frame: one row per trial in start order, with
    `state` (running, paused, completed, pruned, failed, stopped), `status` (its words),
    `steps`, `metric` (the last value of the sweep's metric), cost and timing columns,
    and one column per searched parameter. Works while the sweep runs."""
    sweep_store = store(tracking_uri)
    run = sweep_store.sweep_run(name)
    trials = sweep_store.trials(run=run)
    params = sweep_store.trial_params(trials, sweep_store.record(run=run))
    return trials.drop("params").join(params, on="trial_number", how="left")


@dataclass(frozen=True)
class SweepReportFiles:
    """A report written to `folder`: `html` (self-contained index.html), `markdown`
    (report.md), `leaderboard` (the ranked trials; with several sweeps, all of them with a
    `sweep` column) and `full` (every frame and plotly figure of the report)."""

    folder: Path
    html: Path
    markdown: Path
    leaderboard: pl.DataFrame
    full: Report


def report(*names: str, out: str | Path | None = None, tracking_uri: str | None = None) -> SweepReportFiles:
    """What `sweep report NAME [NAME ...]` writes (default folder
    ./sweep-reports/<names joined by _vs_>), returned with its leaderboard frame."""
    from reports import make_report

    if not names:
        raise TypeError("report() needs at least one sweep name")
    folder = Path(out) if out is not None else Path("sweep-reports") / "_vs_".join(dict.fromkeys(names))
    written = make_report(store(tracking_uri), list(names), folder)
    boards = [sweep.leaderboard.with_columns(pl.lit(sweep.data.name).alias("sweep")) for sweep in written.report.sweeps]
    leaderboard = boards[0].drop("sweep") if len(boards) == 1 else pl.concat(boards, how="diagonal_relaxed")
    return SweepReportFiles(written.folder, written.html, written.markdown, leaderboard, written.report)
