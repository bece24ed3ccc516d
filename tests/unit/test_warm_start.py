"""The warm server (sweeper/cluster/fork_server.py) with real processes, without a Ray cluster: a worker
command run through the client runs as a fork of the server, with the client's
arguments, environment, working directory and standard streams, and exits with its
status; a killed client takes its worker with it; without a server the command runs as
the client itself."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sweeper.cluster.fork_server import SOCKET_ENV, Server

WORKER = textwrap.dedent(
    """
    import os, sys, time
    print(os.getpid(), os.getppid(), os.getpgrp(), os.environ.get("ASKED"), os.environ.get("SWEEPER_WARM_STARTED"), os.getcwd(), "torch" in sys.modules, sys.argv[1:], flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(60)
    sys.exit(int(sys.argv[2]))
    """
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm")
    socket_path = folder / "socket"
    server = Server(str(socket_path), folder / "sweep" / "warm_start.log")
    process = server.process
    deadline = time.time() + 120
    while not socket_path.exists():
        assert process.poll() is None, "the warm server exited"
        assert time.time() < deadline, "the warm server did not start"
        time.sleep(0.2)
    yield process, socket_path
    server.stop()


def test_the_servers_output_goes_to_its_log_file(server):
    process, socket_path = server
    assert (socket_path.parent / "sweep" / "warm_start.log").is_file()


def run_client(socket_path, tmp_path, *args, **popen):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "ASKED": "yes", SOCKET_ENV: str(socket_path)}
    return subprocess.Popen(
        [sys.executable, "-m", "sweeper.cluster.fork_server", str(script), *args],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True, **popen,
    )


def test_a_worker_runs_forked_from_the_server_with_the_clients_context(server, tmp_path):
    process, socket_path = server
    client = run_client(socket_path, tmp_path, "exit", "3", "--raylet-name=/tmp/node-a/raylet")
    out, _ = client.communicate(timeout=60)
    pid, ppid, group, asked, marked, cwd, warm, args = out.split(" ", 7)
    assert client.returncode == 3
    assert int(ppid) == process.pid and int(pid) != client.pid
    assert asked == "yes" and marked == "1" and Path(cwd) == tmp_path
    assert warm == "True"  # torch was imported before the fork
    assert args.strip() == "['exit', '3', '--raylet-name=/tmp/node-a/raylet']"
    # A raylet ends a worker by SIGKILL to its process group: the worker's own, as Ray's
    # workers have, never the server's (the driver's, and the shell's that started it).
    assert int(group) == int(pid) != os.getpgid(process.pid)
    log = (socket_path.parent / "sweep" / "warm_start.log").read_text()
    assert f"forked worker {pid} for raylet /tmp/node-a/raylet" in log


def test_a_killed_client_takes_its_worker_with_it(server, tmp_path):
    _, socket_path = server
    client = run_client(socket_path, tmp_path, "sleep", "0")
    worker_pid = int(client.stdout.readline().split()[0])
    client.send_signal(signal.SIGKILL)
    client.wait(timeout=10)
    wait_until_gone(worker_pid, 10, "the worker outlived its client")


def wait_until_gone(pid: int, timeout_s: float, message: str) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(message)


STAND_IN_RAYLET = textwrap.dedent(
    """
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-m", "sweeper.cluster.fork_server", sys.argv[1], "sleep", "0"])
    time.sleep(600)
    """
)


def test_a_worker_goes_when_the_raylet_that_asked_for_it_is_gone(server, tmp_path):
    """A node lost (its raylet killed): Ray's own workers notice their parent is gone and
    exit; a forked worker's parent is the server, so its client watches the raylet."""
    _, socket_path = server
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    raylet = subprocess.Popen(
        [sys.executable, "-c", STAND_IN_RAYLET, str(script)],
        env={**os.environ, SOCKET_ENV: str(socket_path)}, stdout=subprocess.PIPE, text=True,
    )
    worker_pid = int(raylet.stdout.readline().split()[0])
    raylet.kill()
    raylet.wait(timeout=10)
    # The client looks for its parent every second (RAYLET_CHECK_SECONDS).
    wait_until_gone(worker_pid, 20, "the worker outlived the raylet that asked for it")


SHORT_LIVED_DRIVER = textwrap.dedent(
    """
    import sys
    from sweeper.cluster.fork_server import Server
    print(Server(sys.argv[1]).process.pid, flush=True)
    """
)


def test_a_server_whose_driver_ended_during_its_imports_ends_too(tmp_path):
    """A start refused after the server was started (a join refused, bad storage) ends
    the driver while the server still imports torch: the server must not outlive it."""
    driver = subprocess.run(
        [sys.executable, "-c", SHORT_LIVED_DRIVER, str(tmp_path / "socket")], capture_output=True, text=True, timeout=60
    )
    server_pid = int(driver.stdout.split()[0])
    wait_until_gone(server_pid, 120, "the server outlived the driver that started it")


def test_without_a_server_the_client_runs_the_worker_itself(tmp_path):
    client = run_client(tmp_path / "no-such-socket", tmp_path, "exit", "5")
    out, _ = client.communicate(timeout=60)
    assert client.returncode == 5
    pid, _, _, _, marked, _, warm = out.split()[:7]
    assert int(pid) == client.pid and marked == "None" and warm == "False"


ID_DRAWER = textwrap.dedent(
    """
    import sys
    from ray._raylet import JobID, PlacementGroupID
    print("ray.train" in sys.modules, PlacementGroupID.of(JobID.from_int(1)).hex())
    """
)


def test_forked_workers_have_ray_train_loaded_and_draw_their_own_ids(server, tmp_path):
    """Ray Train is imported in the server, yet each fork draws its own random Ray IDs
    (forks of a seeded generator once gave two trials' runs one placement group)."""
    _, socket_path = server
    script = tmp_path / "draw.py"
    script.write_text(ID_DRAWER)
    env = {**os.environ, SOCKET_ENV: str(socket_path)}
    drawn = [
        subprocess.run(
            [sys.executable, "-m", "sweeper.cluster.fork_server", str(script)],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()
        for _ in range(3)
    ]
    assert all(preloaded == "True" for preloaded, _ in drawn)
    assert len({placement_group_id for _, placement_group_id in drawn}) == 3


def test_a_server_that_hangs_up_without_forking_leaves_the_client_to_run_the_worker(tmp_path):
    """What a server that refuses to serve does (its Ray ID generator would be shared by
    its forks): the worker still starts, as the client itself."""
    import socket
    import threading

    socket_path = tmp_path / "refusing"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path))
    listener.listen(1)

    def refuse():
        conn, _ = listener.accept()
        conn.recv(1 << 16)
        conn.close()

    refuser = threading.Thread(target=refuse)
    refuser.start()
    client = run_client(socket_path, tmp_path, "exit", "4")
    out, _ = client.communicate(timeout=60)
    refuser.join(timeout=10)
    listener.close()
    assert client.returncode == 4
    pid, _, _, _, marked, _, warm = out.split()[:7]
    assert int(pid) == client.pid and marked == "None" and warm == "False"
