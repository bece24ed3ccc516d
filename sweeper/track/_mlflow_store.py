"""Where the sweep's MLflow store is and how to reach it: the tracking URI (with its
default), a check that fails fast, a client, the experiment, and how a trial's state maps
to an MLflow run status; and what a sweep's parent run records of its config and its
machine (the config as flat params, package versions, the git commit, the hardware).

Shared by the writer (`sweeper.track._tracker`, a Tune callback on the driver) and the readers
(`sweeper.track._store`: `sweep list/status/report/promote`). No Ray here, and MLflow only when a
client is made, so the read-only commands start without Ray's import.
"""

from __future__ import annotations

import json
import platform
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from sweeper.errors import UserError
from sweeper.names import TrialState

__all__ = [
    "RUN_STATUS", "resolve_tracking_uri", "default_artifact_location", "check_tracking_uri", "check_tracking_writable",
    "client_for", "ensure_experiment", "hardware_description", "SEARCHED_PREFIX", "flat_params", "package_versions",
    "git_commit", "sqlite_file",
]

# How a searched field's parent-run param begins; its distribution follows as JSON.
SEARCHED_PREFIX = "searched: "
VERSIONED_PACKAGES = ("torch", "transformers", "peft", "trl", "ray", "optuna", "mlflow")

# The MLflow run status a trial's child run ends with.
RUN_STATUS = {
    TrialState.COMPLETED: "FINISHED",
    TrialState.PRUNED: "KILLED",
    TrialState.FAILED: "FAILED",
    TrialState.STOPPED: "KILLED",
}


def resolve_tracking_uri(uri: str | None, workdir: Path | None = None) -> str:
    """The YAML's tracking.uri, or the default SQLite store in the working directory."""
    if uri:
        return uri
    return f"sqlite:///{(workdir or Path.cwd()).resolve() / 'mlflow.db'}"


def default_artifact_location(uri: str, workdir: Path | None = None) -> str | None:
    """Artifacts beside a local SQLite store; a server decides its own."""
    if uri.startswith("sqlite:"):
        return ((workdir or Path.cwd()).resolve() / "mlartifacts").as_uri()
    return None


def sqlite_file(uri: str) -> Path | None:
    """The file of a SQLite store's URI (sqlite:///path), or None for any other store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def check_tracking_uri(uri: str) -> None:
    """Fail fast, before any trial starts or any query runs, if the store cannot be
    reached. Raises UserError (key `tracking.uri`)."""
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as response:
                if response.status != 200:
                    raise OSError(f"HTTP {response.status}")
        except (OSError, urllib.error.URLError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(
                f"tracking.uri: cannot reach MLflow at {uri} ({reason}); start the server "
                "(mlflow server --backend-store-uri sqlite:///mlflow.db) or fix the URI"
            ) from None
    elif (database := sqlite_file(uri)) is not None:
        folder = database.parent
        if not folder.is_dir():
            raise UserError(f"tracking.uri: folder {folder} of the SQLite store does not exist; create it or fix the URI")
        if database.is_dir():  # SQLite would retry opening it for minutes
            raise UserError(f"tracking.uri: {database} is a folder; name the SQLite file in it, sqlite:///{database}/mlflow.db")
    elif uri.startswith("file:") or ("://" not in uri and not uri.startswith("databricks")):
        raise UserError(
            f"tracking.uri: {uri!r} is a file store, which has no Model Registry; use sqlite:///path/mlflow.db "
            "or an http:// MLflow server"
        )
    elif uri.partition("://")[0].partition("+")[0] in DATABASE_SCHEMES:
        _check_database_driver(uri)
    else:
        raise UserError(
            f"tracking.uri: {uri.partition('://')[0] or uri}:// is not a tracking store sweeper can use; give "
            f"sqlite:///path/mlflow.db, an http(s):// MLflow server, or a database URI ({', '.join(DATABASE_SCHEMES)})"
        )


# The databases MLflow keeps a tracking store in besides SQLite, reached through
# SQLAlchemy and a driver the user installs.
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
# Drivers whose package is named otherwise than their module.
_DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient"}


def _check_database_driver(uri: str) -> None:
    """The driver SQLAlchemy picks for `uri` (postgresql: psycopg2, postgresql+psycopg:
    psycopg, ...) is importable: without it the store's first query was a traceback."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    scheme = uri.partition("://")[0]
    try:
        make_url(uri).get_dialect().import_dbapi()
    except ModuleNotFoundError as exc:
        package = _DRIVER_PACKAGES.get(exc.name or "", exc.name)
        raise UserError(
            f"tracking.uri: {scheme}:// needs the database driver {exc.name}, which is not installed here; "
            f"pip install {package}, or use sqlite:///path/mlflow.db or an http(s):// MLflow server"
        ) from None
    except (ArgumentError, NoSuchModuleError) as exc:
        raise UserError(f"tracking.uri: {scheme}:// is not a database URI SQLAlchemy knows ({exc})") from None


def check_tracking_writable(uri: str) -> None:
    """A sweep writes its runs: a SQLite store's file must be writable, or its folder
    take a new one (tried, not asked of os.access, which says yes to root everywhere).
    Raises UserError (key `tracking.uri`)."""
    from sweeper.folders import write_refused

    database = sqlite_file(uri)
    if database is None:
        return
    if database.exists():  # a file: check_tracking_uri refuses a folder
        try:
            with open(database, "ab"):  # opened for writing, nothing written
                pass
        except OSError as exc:
            raise UserError(
                f"tracking.uri: cannot write the SQLite store {database} ({exc.strerror or exc}); make it writable "
                "or give another sqlite:///path/mlflow.db"
            ) from None
        return
    refused = write_refused(database.parent)
    if refused:
        raise UserError(
            f"tracking.uri: cannot create the SQLite store {database}: {database.parent} {refused}; give "
            "sqlite:///path/mlflow.db in a folder you can write to"
        )


def client_for(uri: str):
    """An MlflowClient for the tracking store and Model Registry at `uri` (MLflow creates
    or migrates a SQLite store's tables when it first opens it)."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def ensure_experiment(client, name: str, artifact_location: str | None) -> str:
    """The id of experiment `name`, created (with `artifact_location`) if it is new."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=artifact_location)


def hardware_description(cluster) -> str:
    """One line for the tag `sweeper.hardware`: the driver's machine and the cluster's
    totals (`cluster`: a `sweeper.plan._sweep_plan.ClusterResources`)."""
    return (
        f"{platform.machine()} {platform.system()}; cluster {cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs; "
        f"driver python {platform.python_version()}"
    )


def flat_params(spec) -> dict[str, str]:
    """The sweep's config as dotted keys (the search section is logged as JSON). A
    searched field is logged as searched, with its distribution (`searched: {...}`), not
    with the base value no trial trains with, so that comparing sweeps compares what
    they searched. Defaults that depend on other fields are logged as resolved (the
    first rung, the startup trials, the rungs' spacing and count): what the sweep used."""
    flat: dict[str, str] = {}
    dumped = spec.model_dump(mode="json")
    searched = dumped["search"]["parameters"]

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict) and prefix != "search.parameters":
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        else:
            flat[prefix] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)

    walk("", dumped)
    stopping = spec.early_stopping
    flat["early_stopping.grace_period"] = str(spec.grace_period())
    flat["early_stopping.reduction_factor"] = str(stopping.reduction_factor_for())
    flat["early_stopping.startup_trials"] = str(stopping.startup_trials_for())
    flat["early_stopping.rung_spacing"] = str(stopping.rung_spacing_for())
    flat["early_stopping.rungs"] = str(stopping.rung_count(searched=bool(searched)) or "all below max_steps")
    for path, distribution in searched.items():
        flat[path] = SEARCHED_PREFIX + json.dumps(distribution, separators=(",", ":"))
    return {k: v[:6000] for k, v in flat.items()}


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for package in VERSIONED_PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def git_commit(folder: Path) -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None
