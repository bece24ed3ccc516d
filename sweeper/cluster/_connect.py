"""Which Ray cluster a sweep runs on and how it joins it: the address (`--address`, else
RAY_ADDRESS, else a local cluster of its own, resolved once at the CLI or API edge), a
probe before joining, token auth and its one error message, the settings every trial
process gets."""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Mapping

from sweeper.cluster import ray_adapter
from sweeper.errors import UserError
from trainables.environment import PREEMPTION_WATCHER_ENV

__all__ = [
    "TRIAL_SETTINGS", "JOINED_CLUSTER_SETTINGS", "LOCAL_CLUSTER", "cluster_address", "starts_own_cluster", "auth_token_source",
    "client_auth_settings", "set_auth_mode_before_ray_loads", "bootstrap_endpoint", "check_reachable", "check_address",
    "auth_refused", "auth_problem", "job_metadata", "start_ray", "stop_local_cluster",
]


# Ray Train and Tune settings, read from the environment of the trial processes (which run
# the Train controllers): given to every process of the sweep's Ray job as its runtime_env.
TRIAL_SETTINGS = {
    # The Train controller polls its workers this often: a report reaches Tune and ASHA,
    # and a finished run is noticed, at most this late (Ray's default: 2 s).
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1",
    # Train's watcher of node drains: an actor per trial, a process, and nothing to watch
    # on the one machine of a sweep's own cluster (on where it joins one: below).
    PREEMPTION_WATCHER_ENV: "0",
    # How long Tune waits for a stopped one-worker trial's thread, which unwinds its
    # training loop from the report Tune stopped it at (sweeper/run/_trial.py), before
    # reusing its process; a thread still alive then fails the next trial.
    "TUNE_FUNCTION_THREAD_TIMEOUT_S": "20",
    # No event file per worker process for Ray's dashboard agent to re-read (ray_adapter).
    **ray_adapter.NO_WORKER_EVENT_FILES,
}


# Where a sweep joins a cluster, whose nodes may be taken away (spot or preemptible
# instances): Train's watcher of node drains is on, polling every second (Ray's default:
# 5 s), so that a trial on a node given notice keeps its step and moves with most of a
# short notice left (trainables/preemption.py).
JOINED_CLUSTER_SETTINGS = {PREEMPTION_WATCHER_ENV: "1", "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S": "1"}

LOCAL_CLUSTER = "local"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
PROBE_TIMEOUT_S = 10.0


def cluster_address(address: str | None, environ: Mapping[str, str]) -> str:
    """The Ray address a sweep uses: `--address`, else RAY_ADDRESS, else "local" (a new
    cluster of its own). Never Ray's implicit join: `ray.init()` without an address joins
    whatever `ray start` left in Ray's address file, even a head that is gone."""
    return address or environ.get("RAY_ADDRESS") or LOCAL_CLUSTER


def starts_own_cluster(address: str) -> bool:
    return address == LOCAL_CLUSTER


def auth_token_source(environ: Mapping[str, str], home: Path) -> str | None:
    """Where Ray would find a cluster token for a client, in Ray's order (the variable's
    name or the file's path, never the token itself); None when there is none."""
    if environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    for path in (environ.get("RAY_AUTH_TOKEN_PATH"), home / ".ray" / "auth_token"):
        if path and Path(path).is_file():
            return str(path)
    return None


def client_auth_settings(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """Environment for a client joining a cluster: token mode when a token is where Ray
    looks (a joining client defaults to RAY_AUTH_MODE=disabled and a `ray start --head`
    cluster refuses it); an explicit RAY_AUTH_MODE is the user's choice and stays."""
    if AUTH_MODE_ENV in environ or auth_token_source(environ, home) is None:
        return {}
    return {AUTH_MODE_ENV: "token"}


def bootstrap_endpoint(address: str, address_file: Path | None = None) -> tuple[str, int] | None:
    """The (host, port) a join first talks to: the GCS (HOST:PORT, or for "auto" the
    address `ray start` wrote in Ray's address file) or the Ray Client server
    (ray://HOST:PORT). None when there is nothing to probe (no address file for "auto")."""
    if address == "auto":
        if address_file is None or not address_file.is_file():
            return None
        address = address_file.read_text().strip()
    address = address.removeprefix("ray://")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address: expected auto, HOST:PORT or ray://HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def check_reachable(address: str, endpoint: tuple[str, int] | None, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Refuse, as one keyed line, an address whose cluster does not answer (ray.init
    would retry "Failed to connect to GCS" without end)."""
    import socket

    if endpoint is None:
        raise UserError(
            f"--address: {address} found no running Ray cluster on this machine (no `ray start` address file); "
            "start one with `ray start --head`, give HOST:PORT, or leave --address out to start a local cluster"
        )
    host, port = endpoint
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(
            f"--address: no Ray cluster answers at {host}:{port} ({reason}); check that its head is running "
            "(ray status on the head), give its address, or leave --address out to start a local cluster"
        ) from None


def check_address(address: str) -> tuple[str, int] | None:
    """The (host, port) a joined `address` answers at; UserError, keyed `--address`, for
    one that is malformed or does not answer. Quick, and asked before the data is read or
    anything starts (and again as Ray joins); None for a cluster of the sweep's own."""
    if starts_own_cluster(address):
        return None
    address_file = None
    if address == "auto":
        set_auth_mode_before_ray_loads()  # Ray is imported next, and settles its auth mode as it loads
        from sweeper.cluster.ray_adapter import ray_address_file

        address_file = ray_address_file()
    endpoint = bootstrap_endpoint(address, address_file)
    check_reachable(address, endpoint)
    return endpoint


def auth_refused(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    words = ("InvalidAuthToken", "UNAUTHENTICATED", "authentication token", "AuthenticationError", "Authentication required", "Authentication failed")
    return any(word in text for word in words)


def job_metadata(spec, tracking_uri: str) -> dict[str, str]:
    """The Ray job's metadata: the dashboard's Jobs page shows `job_name` as the job's
    name, the rest on the job's page and in its REST API (/api/jobs/)."""
    from sweeper.spec import trials_text

    return {
        "job_name": spec.name,
        "sweeper.sweep": spec.name,
        "sweeper.task": spec.task,
        "sweeper.model": spec.model.name_or_path,
        "sweeper.num_trials": trials_text(spec).removesuffix(" trials"),
        "sweeper.metric": f"{spec.search.metric} ({spec.search.goal})",
        "sweeper.parameters": ", ".join(spec.search.parameters) or "none",
        "sweeper.sweep_dir": str(spec.sweep_dir),
        "sweeper.mlflow": f"{tracking_uri} (experiment {spec.tracking.experiment})",
    }


def start_ray(address: str, metadata: dict[str, str] | None = None, env_vars: dict[str, str] | None = None):
    """Start a local cluster with its dashboard (`address` "local"), or join `address`
    ("auto", HOST:PORT, ray://HOST:PORT) after checking that it answers, in token mode
    when a token is where Ray looks. The dashboard stays on: besides monitoring, Ray
    Train's placement-group cleanup needs it (without it finished trials kept their
    resources and sweeps hung). `metadata`: the job's (job_metadata), shown by the
    dashboard. `env_vars`: more settings for every process of the job, besides
    TRIAL_SETTINGS (the storage's endpoint: `storage.travelling_settings`); the dashboard
    shows them, so never a secret.

    Raises:
        UserError: the address is malformed, does not answer, or refuses this client's token.
    """
    joining = not starts_own_cluster(address)
    if joining:
        set_auth_mode_before_ray_loads()
    import ray

    from sweeper.driver_log import route_ray_logger

    route_ray_logger()  # Ray's notes as it starts go where the driver's log goes
    if ray.is_initialized():
        return ray.get_runtime_context(), None
    if joining:
        check_address(address)
    runtime_env = {"env_vars": {**TRIAL_SETTINGS, **(JOINED_CLUSTER_SETTINGS if joining else {}), **(env_vars or {})}}
    from ray.job_config import JobConfig

    options = dict(
        job_config=JobConfig(metadata=metadata or {}),
        log_to_driver=False,
        logging_level="WARNING",
        configure_logging=True,
        runtime_env=runtime_env,
    )
    if not joining:
        options.update(include_dashboard=True, dashboard_host="127.0.0.1")
    try:
        context = ray.init(address=address, **options)
    except Exception as exc:
        # A refused token reaches ray.init only as "Failed to connect to Ray cluster" (the
        # InvalidAuthToken is logged); the probe has shown that the address answers.
        sends_no_token = auth_token_source(os.environ, Path.home()) is None or os.environ.get(AUTH_MODE_ENV) == "disabled"
        if joining and (auth_refused(exc) or (isinstance(exc, ConnectionError) and sends_no_token)):
            raise UserError(auth_problem(address)) from None
        raise
    if not joining:  # after Ray's own exit hook, so it runs first (once, however many sweeps)
        atexit.unregister(stop_local_cluster)
        atexit.register(stop_local_cluster)
    url = context.dashboard_url
    url = f"http://{url}" if url and not url.startswith("http") else url
    if joining and os.environ.get(AUTH_MODE_ENV) == "token" and cluster_auth_mode(url) == "disabled":
        ray.shutdown()  # only leaves the cluster
        raise UserError(token_to_a_cluster_without_auth(address))
    return context, url


def cluster_auth_mode(dashboard_url: str | None) -> str | None:
    """The cluster's authentication mode ("token" or "disabled") as its dashboard tells
    anyone (`/api/authentication_mode`, open without a token: the dashboard's login page
    asks it); None when there is no dashboard to ask or it does not answer."""
    import json
    import urllib.request

    if not dashboard_url:
        return None
    try:
        with urllib.request.urlopen(f"{dashboard_url}/api/authentication_mode", timeout=PROBE_TIMEOUT_S) as response:
            return json.load(response).get("authentication_mode")
    except (OSError, ValueError, AttributeError):
        return None


def token_to_a_cluster_without_auth(address: str) -> str:
    """The one message for a token-mode client joining a head started with token auth off
    (RAY_AUTH_MODE=disabled, as `ray start --head` suggests to opt out): the join succeeds,
    but the cluster's workers, without tokens, cannot call back into this driver, and every
    trial failed with "The actor never ran"."""
    source = auth_token_source(os.environ, Path.home())
    found = f"the token from {source}" if source else "a token (RAY_AUTH_MODE=token)"
    return (
        f"--address: the Ray cluster at {address} has token authentication off (its head runs with "
        f"RAY_AUTH_MODE=disabled) but this client would send {found}; set RAY_AUTH_MODE=disabled here too, "
        "or restart the head without RAY_AUTH_MODE=disabled"
    )


def stop_local_cluster() -> None:
    """`ray.shutdown` (nothing if Ray is down: a cluster joined is only left). At exit
    this runs before Ray's own hook, which then finds Ray down and skips the half second
    it waits for workers' last log lines (this driver asks for none: log_to_driver=False)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def auth_problem(address: str) -> str:
    """The one message for a cluster that wants a token this client lacks, that it refused,
    or that this client's RAY_AUTH_MODE=disabled keeps from being sent."""
    source = auth_token_source(os.environ, Path.home())
    if os.environ.get(AUTH_MODE_ENV) == "disabled":
        found = f"; the token from {source} would be sent without it" if source else ""
        return (
            f"--address: the Ray cluster at {address} requires an authentication token, but RAY_AUTH_MODE=disabled "
            f"here sends none{found}; unset RAY_AUTH_MODE (or set it to token)"
            + ("" if source else " and put the token from `ray get-auth-token` on its head in ~/.ray/auth_token")
        )
    if source is None:
        return (
            f"--address: the Ray cluster at {address} requires an authentication token and none was found; "
            "run `ray get-auth-token` on its head and put the token in ~/.ray/auth_token here "
            "(or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)"
        )
    return (
        f"--address: the Ray cluster at {address} refused the token from {source}; "
        "run `ray get-auth-token` on its head and put that token there"
    )


def set_auth_mode_before_ray_loads() -> None:
    """Ray reads its auth mode from the environment of the process that joins a cluster,
    once, when it loads: a client about to join (ray.init, the Jobs SDK) sets it here,
    the only place this package writes Ray's environment."""
    os.environ.update(client_auth_settings(os.environ, Path.home()))
