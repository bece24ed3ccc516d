"""Joining a cluster that `ray start --head --block` runs in its own process, with
token authentication on as Ray 2.60 starts it: a sweep's Ray start joins it with the
token where Ray looks and no other setting, refuses it without one in one keyed line
that names `ray get-auth-token`, and never prints the token; a sweep joining a cluster
of two nodes with its folder on one machine's disk, or a head with token auth off while the
client has a token, is refused in one keyed line. (An address where nothing answers, also
through `auto`, needs no cluster: tests/unit/test_start_input.py.)"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.integration import cli_process
from tests.integration.conftest import NODE_ENV, RAY, end_process_group, wait_for_port
from tests.ports import free_port

pytestmark = pytest.mark.integration

JOIN = textwrap.dedent(
    """
    import sys
    from sweeper.errors import UserError
    from sweeper.run._launch import start_ray
    try:
        start_ray(sys.argv[1])  # before Ray is loaded, as in `sweep start`
    except UserError as exc:
        print("USER ERROR", exc)
        sys.exit(2)
    import ray
    print("JOINED", int(ray.cluster_resources().get("CPU", 0)), ray.cluster_resources().get("head_marker"))
    ray.shutdown()
    """
)


HEAD_DASHBOARDS: dict[str, str] = {}  # head address -> its dashboard URL
RAY_TEMP: dict[str, str] = {}  # head address -> its Ray temp folder


@contextlib.contextmanager
def token_head(root: Path, auth_off: bool = False):
    """A token-authenticated head node in its own process (its own HOME under `root`, so
    its token is its own), ended by its pid whatever the tests did. `auth_off`: started
    with RAY_AUTH_MODE=disabled, as `ray start --head` says to opt out, its token file
    still there."""
    home = root / "head-home"
    home.mkdir()
    port, dashboard = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    # A job's entrypoint runs `python` from the head's PATH, as on a cluster.yaml head.
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", **NODE_ENV)
    # As on a machine where Ray ran before (or after `ray get-auth-token --generate`): with
    # a token in ~/.ray, `ray start --head` turns token authentication on.
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, capture_output=True, check=True, timeout=120)
    log = open(root / "head.log", "wb")
    if auth_off:
        env["RAY_AUTH_MODE"] = "disabled"
    # Ray's Unix sockets live under its temp folder; pytest's tmp_path is too long a path.
    ray_temp = tempfile.mkdtemp(prefix="h8ray-", dir="/tmp")
    RAY_TEMP[f"127.0.0.1:{port}"] = ray_temp
    process = subprocess.Popen(
        [RAY, "start", "--head", "--block", "--port", str(port), "--dashboard-port", str(dashboard),
         "--num-cpus", "1", "--resources", '{"head_marker": 1}', "--temp-dir", ray_temp,
         "--ray-client-server-port", str(free_port()), "--min-worker-port", "0", "--max-worker-port", "0",
         # Not Ray's default 52365, which another Ray on the machine (a sweep's local
         # cluster still ending) may hold: without its agent the head refuses jobs ("No
         # available agent to submit job").
         "--dashboard-agent-listen-port", str(free_port())],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        wait_for_port(port, process)
        token_file = home / ".ray" / "auth_token"
        HEAD_DASHBOARDS[f"127.0.0.1:{port}"] = f"http://127.0.0.1:{dashboard}"
        yield f"127.0.0.1:{port}", token_file
    finally:
        # The whole session: the head's GCS, raylet and dashboard processes too.
        end_process_group(process)
        log.close()
        shutil.rmtree(ray_temp, ignore_errors=True)


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """One head for the module's tests that leave it as they found it (joins, a refusal,
    `sweep plan`): a head start and end is about 6 s."""
    with token_head(tmp_path_factory.mktemp("cluster")) as started:
        yield started


@pytest.fixture
def own_head(tmp_path):
    """A head of the test's own: one that a second node joins (a node's end is seen by
    the head only after its health checks, which would size later tests' plans), or
    that runs a job."""
    with token_head(tmp_path) as started:
        yield started


def start_worker_node(address: str, head_home: Path, tmp_path: Path) -> subprocess.Popen:
    """A second node joining the head as cluster.yaml's workers do: token mode, the head's token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(head_home), RAY_AUTH_MODE="token", **NODE_ENV)
    log = open(tmp_path / "worker.log", "wb")
    return subprocess.Popen(
        [RAY, "start", "--block", "--address", address, "--num-cpus", "1", "--resources", '{"worker_marker": 1}',
         "--temp-dir", RAY_TEMP[address],
         "--min-worker-port", "0", "--max-worker-port", "0"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def join(address: str, tmp_path: Path, **env_extra) -> subprocess.CompletedProcess:
    home = tmp_path / "client-home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(home), **env_extra)
    return subprocess.run([sys.executable, "-c", JOIN, address], env=env, capture_output=True, text=True, timeout=120)


# First the tests with a head of their own: the module's head starts after them, so that
# no two heads run at once.
def test_a_submitted_sweep_runs_as_a_job_that_logs_stop_and_resume_reach(own_head, tmp_path):
    address, token_file = own_head
    dashboard = HEAD_DASHBOARDS[address]
    root = Path(__file__).resolve().parents[2]
    workdir = tmp_path / "project"
    shutil.copytree(root / "data", workdir / "data")
    (workdir / "spaces").mkdir()
    text = (root / "search_spaces" / "quickstart.yaml").read_text().replace("name: quickstart", "name: submitted")
    (workdir / "spaces" / "submitted.yaml").write_text(text + f"\noutput_dir: {tmp_path / 'cluster-sweeps' / 'submitted'}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(RAY_AUTH_TOKEN_PATH=str(token_file), COLUMNS="200", HOME=str(tmp_path))

    # The head's GCS answers before its dashboard does.
    deadline = time.time() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", int(dashboard.rsplit(":", 1)[1])), timeout=1).close()
            break
        except OSError:
            assert time.time() < deadline, "the head's dashboard did not start"
            time.sleep(1)
    submitted = sweep_cli("submit", "spaces/submitted.yaml", "--address", dashboard, cwd=workdir, env=env, timeout=120)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "Submitted sweep 'submitted' as job sweep-submitted-" in submitted.stdout
    assert f"Dashboard: {dashboard}/#/jobs/sweep-submitted-" in submitted.stdout
    stopped = sweep_cli("stop", "submitted", "--address", dashboard, cwd=workdir, env=env, timeout=120)
    assert stopped.returncode == 0 and "Stopped job sweep-submitted-" in stopped.stdout, stopped.stdout + stopped.stderr
    logs = sweep_cli("logs", "submitted", "--address", dashboard, cwd=workdir, env=env, timeout=180)
    assert logs.returncode == 0 and "Job of sweep 'submitted': STOPPED" in logs.stdout, logs.stdout + logs.stderr
    resumed = sweep_cli("resume", "submitted", "--address", dashboard, cwd=workdir, env=env, timeout=120)
    assert resumed.returncode == 0 and "Submitted the resume of sweep 'submitted' as job" in resumed.stdout, resumed.stdout + resumed.stderr
    stopped = sweep_cli("stop", "submitted", "--address", dashboard, cwd=workdir, env=env, timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert token_file.read_text().strip() not in "".join(r.stdout + r.stderr for r in (submitted, stopped, logs, resumed))


def test_a_sweep_joining_two_nodes_with_its_folder_on_one_disk_is_refused(own_head, tmp_path):
    address, token_file = own_head
    worker = start_worker_node(address, token_file.parent.parent, tmp_path)
    try:
        join_env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
        join_env.update(RAY_AUTH_TOKEN_PATH=str(token_file), COLUMNS="200")
        deadline = time.time() + 90
        while "worker_marker" not in _resources(address, tmp_path, token_file):
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.time() < deadline, "the worker node did not join"
            time.sleep(1)
        quickstart = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml"
        refused = sweep_cli("start", str(quickstart), "--address", address, cwd=tmp_path, env=join_env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "error: storage.uri: the sweep's checkpoints would go to" in refused.stderr
        assert "2 node" not in refused.stderr and "1 node(s)" in refused.stderr
        assert token_file.read_text().strip() not in refused.stdout + refused.stderr
    finally:
        end_process_group(worker)


def test_a_client_with_a_token_joining_a_head_with_auth_off_is_one_keyed_line(tmp_path):
    """The join itself succeeds, but the cluster's workers cannot call back into a token-mode
    driver: every trial once failed with "The actor never ran" and the driver ended in a
    traceback. Refused before anything starts; with RAY_AUTH_MODE=disabled it joins."""
    with token_head(tmp_path, auth_off=True) as (address, token_file):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
        env.update(RAY_AUTH_TOKEN_PATH=str(token_file), COLUMNS="200")
        workdir = tmp_path / "project"
        workdir.mkdir()
        quickstart = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml"
        refused = sweep_cli("start", str(quickstart), "--address", address, cwd=workdir, env=env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert (
            f"error: --address: the Ray cluster at {address} has token authentication off (its head runs with "
            f"RAY_AUTH_MODE=disabled) but this client would send the token from {token_file}; "
            "set RAY_AUTH_MODE=disabled here too"
        ) in refused.stderr
        assert "Traceback" not in refused.stderr
        assert sorted(path.name for path in workdir.iterdir()) == []  # no sweep folder, no MLflow store
        joined = join(address, tmp_path, RAY_AUTH_TOKEN_PATH=str(token_file), RAY_AUTH_MODE="disabled")
        assert "JOINED 1 1.0" in joined.stdout, joined.stdout + joined.stderr


@pytest.mark.story
def test_a_sweep_joins_a_token_cluster_with_the_token_where_ray_looks(head, tmp_path):
    address, token_file = head
    assert token_file.is_file(), "the head wrote no token"
    token = token_file.read_text().strip()
    joined = join(address, tmp_path, RAY_AUTH_TOKEN_PATH=str(token_file))
    assert "JOINED 1 1.0" in joined.stdout, joined.stdout + joined.stderr
    assert token not in joined.stdout + joined.stderr


# A refused client retries its connection to the head's GCS once a second, 20 times, before
# ray.init gives up (Ray 2.60 reads this variable for the count); the refusal is the same
# after 2, and a Ray that ignored it would only make these tests slower.
REFUSED_JOIN = {"RAY_NUM_REDIS_GET_RETRIES": "2"}


def test_without_a_token_the_refusal_is_one_keyed_line_naming_ray_get_auth_token(head, tmp_path):
    address, token_file = head
    refused = join(address, tmp_path, **REFUSED_JOIN)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"USER ERROR --address: the Ray cluster at {address} requires an authentication token" in refused.stdout
    assert "ray get-auth-token" in refused.stdout
    # A token where Ray looks, but RAY_AUTH_MODE=disabled set here: the token is never sent,
    # so the line names the mode, not a refused token.
    refused = join(address, tmp_path, RAY_AUTH_TOKEN_PATH=str(token_file), RAY_AUTH_MODE="disabled", **REFUSED_JOIN)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        f"USER ERROR --address: the Ray cluster at {address} requires an authentication token, but "
        f"RAY_AUTH_MODE=disabled here sends none; the token from {token_file} would be sent without it"
    ) in refused.stdout, refused.stdout + refused.stderr


def sweep_cli(*args, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return cli_process.run(list(args), cwd=cwd, env=env, timeout=timeout)


def _resources(address: str, tmp_path: Path, token_file: Path) -> str:
    script = "import ray; ray.init(address=%r, log_to_driver=False); print(sorted(ray.cluster_resources()))" % address
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file), HOME=str(tmp_path))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120).stdout


def test_plan_sizes_the_sweep_on_the_cluster_it_joins(head, tmp_path):
    """`sweep plan --address`: the step budget and forecast use the cluster's slots (the
    head offers 1 CPU: one trial at a time), with the token where Ray looks."""
    address, token_file = head
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(RAY_AUTH_TOKEN_PATH=str(token_file), COLUMNS="200")
    quickstart = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml"
    planned = sweep_cli("plan", str(quickstart), "--address", address, cwd=tmp_path, env=env)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "1 at a time on 1 CPUs" in planned.stdout, planned.stdout
    # Calibrated on the cluster, as a Ray task with one worker's resources.
    assert "in a Ray task with one worker's resources" in planned.stdout, planned.stdout
    assert "Expected:" in planned.stdout and "nothing was started" in planned.stdout
    assert not (tmp_path / "sweeps").exists()
    assert token_file.read_text().strip() not in planned.stdout + planned.stderr
