"""Sweeps that run on the cluster as Ray Jobs (the Jobs SDK): `sweep submit` sends the
sweep's YAML and its data in the job's working_dir and runs `sweep start` there, so the
driver lives on the cluster, not on the machine that submitted it; `sweep logs`,
`sweep stop` and `sweep resume` find the sweep's latest job by its metadata."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import UserError
from sweeper.cluster._connect import auth_problem, auth_refused, set_auth_mode_before_ray_loads

SWEEP_METADATA = "sweeper_sweep"
SWEEP_DIR_METADATA = "sweeper_sweep_dir"
SWEEP_STORAGE_METADATA = "sweeper_storage_uri"
# What never travels in a job's working_dir: environments, results, stores.
WORKING_DIR_EXCLUDES = [".git", ".venv", "sweeps", "sweep-reports", "mlruns", "mlartifacts", "mlflow.db", "*.pyc", "__pycache__"]
# A stopped job's driver gets SIGTERM, which stops the sweep as SIGINT does (trials stopped
# and saved, runs marked: sweeper/run/_launch.py); Ray's job supervisor kills it after
# RAY_JOB_STOP_WAIT_TIME_S (3 s by default), too soon for that: it waits as long as
# `sweep stop` does.
JOB_ENV = {"RAY_JOB_STOP_WAIT_TIME_S": "300"}


@dataclass(frozen=True)
class SubmittedSweep:
    job_id: str
    dashboard_url: str


def job_entrypoint(command: str, *args: str) -> str:
    """The shell command the job runs on the head: this package's CLI with the cluster's
    own Ray (RAY_ADDRESS is set for a job's driver)."""
    return " ".join(["python", "-m", "sweeper.cli", command, *map(shlex.quote, args)])


def working_dir_path(file: Path, working_dir: Path) -> str:
    """FILE as the job sees it: relative to the working_dir that travels with the job.

    Raises:
        UserError: FILE lies outside the working_dir (it would not travel).
    """
    try:
        return Path(file).resolve().relative_to(working_dir.resolve()).as_posix()
    except ValueError:
        raise UserError(
            f"FILE: {file} is outside the folder sent to the cluster ({working_dir}); "
            "run sweep submit from a folder that holds the YAML and its data"
        ) from None


def client(address: str | None):
    """A Jobs SDK client for the dashboard at `address` (the CLI's --address, else
    RAY_ADDRESS), in token mode when a token is where Ray looks."""
    if not address or not address.startswith(("http://", "https://")):
        raise UserError(f"--address: give the cluster's dashboard, http://HEAD:8265, got {address!r}")
    set_auth_mode_before_ray_loads()
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # the SDK raises ConnectionError or RuntimeError texts
        raise UserError(_connection_problem(address, exc)) from None


def _connection_problem(address: str, exc: Exception) -> str:
    if auth_refused(exc):
        return auth_problem(address)
    return f"--address: no Ray dashboard answers at {address} ({type(exc).__name__}); check the head's address and port (8265)"


def submitted_sweep(file: Path) -> tuple[str, str | None, str | None]:
    """The sweep's name, its folder on the cluster and its object storage (storage.uri
    s3://...), from FILE (validated in full on the cluster, where its paths exist).

    Raises:
        UserError: no name, or neither object storage nor an absolute output_dir: a job's
        working_dir is unpacked anew for every job, so a sweep kept only inside it would
        be lost to `sweep resume` (with object storage, the resume fetches it from there).
    """
    from sweeper.cluster.storage import is_remote
    from sweeper.spec import read_yaml

    raw = read_yaml(file)
    name, output_dir = raw.get("name"), raw.get("output_dir")
    storage_uri = raw["storage"].get("uri") if isinstance(raw.get("storage"), dict) else None
    if not isinstance(name, str) or not name:
        raise UserError(f"name: a submitted sweep needs a name, got {name!r}")
    remote = isinstance(storage_uri, str) and is_remote(storage_uri)
    absolute = isinstance(output_dir, str) and output_dir.startswith("/")
    if not remote and not absolute:
        raise UserError(
            f"output_dir: a submitted sweep needs storage.uri on object storage (s3://bucket/prefix/{name}) or an "
            f"absolute output_dir on the cluster that outlives the job (a shared file system, e.g. /mnt/sweeps/{name}), "
            f"got {output_dir!r}"
        )
    return name, output_dir if absolute else None, storage_uri.rstrip("/") if remote else None


def submit(
    name: str, where: tuple[str | None, str | None], command: str, args: list[str], address: str | None, working_dir: Path
) -> SubmittedSweep:
    """Run `sweep COMMAND ARGS` on the cluster as a Ray Job tagged with the sweep's name
    and where it is kept, `where`: (its folder on the cluster, its object storage)."""
    jobs = client(address)
    sweep_dir, storage_uri = where
    kept = {SWEEP_DIR_METADATA: sweep_dir, SWEEP_STORAGE_METADATA: storage_uri}
    job_id = jobs.submit_job(
        entrypoint=job_entrypoint(command, *args),
        submission_id=f"sweep-{name}-{time.strftime('%Y%m%d-%H%M%S')}",
        runtime_env={"working_dir": str(working_dir), "excludes": WORKING_DIR_EXCLUDES, "env_vars": JOB_ENV},
        metadata={SWEEP_METADATA: name, **{key: value for key, value in kept.items() if value}},
    )
    return SubmittedSweep(job_id, f"{jobs.get_address().rstrip('/')}/#/jobs/{job_id}")


def resume(name: str, address: str | None, working_dir: Path) -> SubmittedSweep:
    """Submit `sweep resume` for the sweep of its latest job: from its object storage
    when it has one (the job's own folder is fresh), else from its folder on the cluster."""
    jobs = client(address)
    metadata = _latest(jobs, name).metadata
    where = (metadata.get(SWEEP_DIR_METADATA), metadata.get(SWEEP_STORAGE_METADATA))
    return submit(name, where, "resume", resume_args(name, *where), address, working_dir)


def resume_args(name: str, sweep_dir: str | None, storage_uri: str | None) -> list[str]:
    """`sweep resume`'s arguments in the resume job: the sweep from its object storage when
    it has one, into its folder on the cluster when it has one (else the job's own)."""
    return [name, *(["--storage", storage_uri] if storage_uri else []), *(["--sweep-dir", sweep_dir] if sweep_dir else [])]


def latest_job(jobs, name: str) -> str:
    """The submission id of the sweep's latest job.

    Raises:
        UserError: the cluster has no job for this sweep.
    """
    return _latest(jobs, name).submission_id


def _latest(jobs, name: str):
    mine = [job for job in jobs.list_jobs() if (job.metadata or {}).get(SWEEP_METADATA) == name]
    if not mine:
        raise UserError(f"NAME: the cluster has no submitted sweep {name!r}; submit it with sweep submit FILE")
    return max(mine, key=lambda job: job.start_time or 0)


def follow_logs(name: str, address: str | None, write) -> str:
    """Print the sweep's latest job's logs as they come, until it ends; its final status."""
    import asyncio

    jobs = client(address)
    job_id = latest_job(jobs, name)

    async def tail():
        async for lines in jobs.tail_job_logs(job_id):
            write(lines)

    asyncio.run(tail())
    return str(jobs.get_job_status(job_id))


def stop(name: str, address: str | None) -> str:
    """Stop the sweep's latest job (its driver stops the trials; `sweep resume --address`
    continues it). Returns the job id."""
    jobs = client(address)
    job_id = latest_job(jobs, name)
    jobs.stop_job(job_id)
    return job_id
