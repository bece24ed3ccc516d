"""What the integration tests share: one real sweep for the tests that only read what it
left behind (terminal output, sweep folder, MLflow store): 5 trials on 2 slots with ASHA,
the first a startup trial; the Ray command and the wait for a head node to listen."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.conftest import small_sweep, wait_for, write_yaml
from tests.integration import cli_process

# For the `ray start --block` nodes the tests start and end with end_process_group: no
# drain on SIGTERM. Ray's drain (30 s by default) asks the GCS, which the same SIGTERM to
# the head's process group has ended, so each head took the whole 30 s to go.
NODE_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}

RAY = str(Path(sys.executable).with_name("ray"))

# Every integration test ends within this bound (pytest-timeout) unless it sets its own:
# a hang fails that test with the stack of every thread, which shows what it waited for,
# instead of eating CI's 90 minutes. The slowest test today takes about 5 minutes.
INTEGRATION_TIMEOUT_S = 600


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(INTEGRATION_TIMEOUT_S))


# The environment of every `sweep` command a test runs, less what a test adds.
CLI_ENV = {"COLUMNS": "200"}


@pytest.fixture(scope="session", autouse=True)
def cli_zygote(tmp_path_factory):
    """One process that imports the CLI's stack for the whole run and forks the tests'
    `sweep` commands from it (tests/integration/cli_process.py); SWEEPER_TESTS_FORK=0 runs
    each as a new interpreter instead."""
    if os.environ.get("SWEEPER_TESTS_FORK") == "0":
        yield None
        return
    zygote = cli_process.start_zygote(tmp_path_factory.mktemp("cli"), CLI_ENV)
    yield zygote
    cli_process.end_zygotes()


@pytest.fixture(scope="session")
def migrated_store_template(tmp_path_factory) -> Path:
    """An empty MLflow SQLite store, created once per test run by the installed MLflow
    through its client (in a process of its own, so that no connection stays open on it)."""
    path = tmp_path_factory.mktemp("store-template") / "mlflow.db"
    subprocess.run([sys.executable, "-c", "import mlflow, sys; mlflow.MlflowClient(f'sqlite:///{sys.argv[1]}')"
                    ".search_experiments()", str(path)], check=True, capture_output=True, timeout=300)
    return path


@pytest.fixture(autouse=True)
def migrated_store(request, tmp_path, migrated_store_template):
    """Each test's `tmp_path/mlflow.db` (the default store of a sweep run there) starts as a
    copy of the migrated template: creating a store runs MLflow's schema migrations, a few
    seconds and many fsyncs on every sweep otherwise. A test of what a command leaves
    behind (`@pytest.mark.fresh_store`) gets an empty folder."""
    if request.node.get_closest_marker("fresh_store") is None:
        shutil.copyfile(migrated_store_template, tmp_path / "mlflow.db")


def pytest_terminal_summary(terminalreporter):
    started = cli_process.COMMANDS
    if sum(started.values()):
        terminalreporter.write_line(f"sweep commands: {started['forked']} forked from the test zygote "
                                    f"({cli_process.zygotes_started()} started), "
                                    f"{started['new interpreter']} as new interpreters")
        if cli_process.UNFORKED_FOR:
            keys = ", ".join(f"{key} ({count})" for key, count in cli_process.UNFORKED_FOR.most_common())
            terminalreporter.write_line(f"sweep commands not forked for their environment's {keys}")


def run_cli(*args, cwd, timeout=900, env: dict | None = None) -> subprocess.CompletedProcess:
    """`sweep ARGS` to its end, its output captured; `env` over the test run's."""
    return cli_process.run(list(args), cwd=cwd, env={**os.environ, **CLI_ENV, **(env or {})}, timeout=timeout)


def end_process_group(process: subprocess.Popen, grace_s: float = 30) -> None:
    """End a process started with start_new_session=True and every process of its group
    (a `ray start --block` node's GCS, raylet and dashboard; a server's workers), by its
    pid: SIGTERM, then SIGKILL after `grace_s`."""
    end_process_groups([process], grace_s)


def end_process_groups(processes: list[subprocess.Popen], grace_s: float = 30) -> None:
    """end_process_group for several at once: every group is told first, so their ends
    overlap (a cluster's nodes each take seconds to go)."""
    import contextlib
    import signal

    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.time() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for_port(port: int, process: subprocess.Popen, timeout_s: float = 120) -> None:
    """Until a node started by `process` listens on `port` (a head's GCS)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert process.poll() is None, "the head node exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the head node did not listen on {port}")


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_driver_and_its_cluster(driver: subprocess.Popen) -> None:
    """kill -9 of a driver and every process under it (its local Ray cluster), as a lost
    machine would end them; returns once each has ended (killed is not yet gone: each ends,
    or waits as a zombie for whoever reaps it, within moments)."""
    cluster = [psutil.Process(driver.pid), *psutil.Process(driver.pid).children(recursive=True)]
    for process in cluster:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    driver.wait(timeout=60)
    wait_for(lambda: not [p for p in cluster[1:] if alive(p)], 30, "the killed cluster's processes to end", every=0.2)


def start_driver(*args, cwd, env: dict | None = None):
    """`sweep ARGS` as a process of its own (session included) to signal (kill -9, SIGINT)
    while it drives, its output and errors on `stdout`; `env` over the test run's."""
    return cli_process.start(list(args), cwd=cwd, env={**os.environ, **CLI_ENV, **(env or {})})


def sweep_runs(uri: str, name: str):
    """(parent runs, child runs) of sweep `name` in the MLflow store at `uri`."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("sweeper")
    if experiment is None:
        return [], []
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`sweeper.sweep_name` = '{name}'")
    return ([r for r in runs if r.data.tags["sweeper.kind"] == "sweep"],
            [r for r in runs if r.data.tags["sweeper.kind"] == "trial"])


@dataclass
class FinishedSweep:
    workdir: Path
    yaml: Path
    result: subprocess.CompletedProcess
    name: str

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.workdir / 'mlflow.db'}"


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory) -> FinishedSweep:
    workdir = tmp_path_factory.mktemp("shared-sweep")
    # Calibrated, as `sweep start` does by default (the other small sweeps skip it).
    raw = small_sweep("shared", search={"num_trials": 5, "seed": 3}, early_stopping={"startup_trials": 1},
                      cost={"calibrate": True})
    path = write_yaml(workdir / "shared.yaml", raw)
    result = run_cli("start", str(path), cwd=workdir, timeout=600)
    return FinishedSweep(workdir, path, result, "shared")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium, which scripts/setup.sh installs where it can (apt-get, as root):
    the browser the report test opens index.html in, and kaleido's for the static plots."""
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("Debian's chromium is missing: scripts/setup.sh installs it as root (apt-get install chromium)")
    return path
