"""Warm starts for Ray worker processes: a fork server with Ray (core, Train, Tune),
torch, transformers and peft already imported, so that a trial's new processes (its Train
workers above all) start in a second or two instead of importing for 8-10 CPU-seconds.

Ray starts every worker process of a job through the job's `py_executable`, which a
CPU sweep whose nodes are all on its machine (its own local cluster, or one it joins)
sets to `python -m sweeper.cluster.fork_server` (sweeper/cluster/connect.py). That command
is the client: it hands its arguments, environment, working directory and standard
streams to the server on this machine over a Unix socket; the server forks a child that
runs Ray's `default_worker.py` with them, in a session of its own as Ray's workers are.
The child registers with the raylet under its own pid (as workers started through
`uv run` do), so Ray signals and kills the child itself; the client waits for the child
and exits with its status, and the server kills a child whose client died. Without a
server (it is still importing, gone, or refused to serve) the client simply execs the
normal worker.

The server forks from its only Python thread and never initialises CUDA; per CPU-second
the training loop in a forked Train worker does the same work as in a plain process,
within this machine's noise (benchmarks/README.md).
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys

from sweeper.cluster import ray_adapter

SOCKET_ENV = "SWEEPER_WARM_START_SOCKET"
# Set in the environment of every process the server forks (trainables/worker.py reports it).
from trainables.environment import WARM_STARTED_ENV  # noqa: E402
# What the processes of a sweep import: torch, transformers, peft and the training code,
# then, in the workers' environment, Ray with Train and Tune (Ray's core reads settings
# such as the job id from the environment once, when it is loaded).
WARM_IMPORTS = (
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "peft",
    "sweeper.spec.schema",
    "trainables.sft",
    "trainables.dpo",
)
RAY_IMPORTS = (
    "ray",
    "ray.train.torch",
    "ray.tune",
    *ray_adapter.RAY_TRAIN_WORKER_MODULES,
    "sweeper.run.trial",
    "trainables.worker",
)
_HEADER = struct.Struct("!I")
FORKED = b"F"
# How often a client checks that the raylet that started it is still there.
RAYLET_CHECK_SECONDS = 1.0
REFUSED = -1  # _fork_worker: this server cannot serve


def supported() -> bool:
    """Linux only: the server watches its children through pidfds (Linux 5.3+)."""
    if sys.platform != "linux" or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an older kernel, or a sandbox that forbids the call
        return False
    return True


def runtime_env(socket_path: str) -> dict:
    """The job runtime_env entries that route a job's worker starts through the server
    listening on `socket_path` (clients fall back to a plain start until it listens)."""
    import shlex

    return {
        "py_executable": f"{shlex.quote(sys.executable)} -m sweeper.cluster.fork_server",
        "env_vars": {SOCKET_ENV: socket_path},
    }


def new_socket_path() -> str:
    import tempfile

    return os.path.join(tempfile.mkdtemp(prefix="sweeper-warm-"), "socket")


class Server:
    """This node's server, started in the background before anything else of the sweep:
    it imports torch, transformers and peft while the sweep tokenizes its data and Ray
    starts, then listens. Ray's core, Train and Tune it loads when the first worker asks,
    in that worker's environment: the core reads settings such as the job id from the
    environment once, when it is loaded. It ends when the process that started it ends,
    or with `stop`. Its output (import warnings, a failed fork) goes to `log_path`,
    appended; without one, nowhere."""

    def __init__(self, socket_path: str, log_path: str | os.PathLike | None = None):
        import subprocess

        self.socket_path = socket_path
        log = subprocess.DEVNULL
        if log_path is not None:
            os.makedirs(os.path.dirname(os.fspath(log_path)) or ".", exist_ok=True)
            log = open(log_path, "ab")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "sweeper.cluster.fork_server", "--serve", socket_path, str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(self.socket_path))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--serve"]:
        serve(argv[1], int(argv[2]))
    else:
        start_worker(argv)


# ---- client: the worker command Ray runs -------------------------------------------


def start_worker(worker_argv: list[str]) -> None:
    """Run Ray's worker (`worker_argv` = default_worker.py and its arguments) as a child
    of the warm server, or, without one, as this process. The client ends when the
    process that started it (the node's raylet) has gone, and the server then kills the
    worker: a worker started by its raylet notices that its parent is gone and exits, a
    forked one has the server for its parent and would train on for a node that is lost."""
    raylet = os.getppid()
    path = os.environ.get(SOCKET_ENV)
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path or "")
    except OSError:
        os.execv(sys.executable, [sys.executable, *worker_argv])
    request = json.dumps({"argv": worker_argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    conn.sendmsg(
        [_HEADER.pack(len(request)) + request],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))],
    )
    # The server answers FORKED once the worker runs (a server that will not serve hangs
    # up instead), then the worker's exit status once it has ended.
    if _recv_exactly(conn, len(FORKED)) != FORKED:
        conn.close()
        os.execv(sys.executable, [sys.executable, *worker_argv])
    while not select.select([conn], [], [], RAYLET_CHECK_SECONDS)[0]:
        if os.getppid() != raylet:
            os._exit(1)  # the connection closes with this process: the server kills the worker
    status = _recv_exactly(conn, _HEADER.size)
    os._exit(_HEADER.unpack(status)[0] if status else 1)


# ---- server ------------------------------------------------------------------------


def serve(socket_path: str, parent: int) -> None:
    """Import torch and the training code, listen, and fork a worker for each client
    (loading Ray for the first) until `parent` (the sweep's driver, which started this
    server) is gone."""
    import importlib

    for module in WARM_IMPORTS:
        importlib.import_module(module)
    # `parent` is the driver's pid, passed in: a driver that ended during the imports (a
    # refused start) has left this server to init, and its parent pid then read 1 for good.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    listener.bind(socket_path)
    listener.listen(64)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, client connection)
    clients: dict[socket.socket, int] = {}  # client connection -> pid
    try:
        while os.getppid() == parent:
            ready, _, _ = select.select([listener, *clients, *children], [], [], 1.0)
            for item in ready:
                if item is listener:
                    conn, _ = listener.accept()
                    pid = _fork_worker(conn, listener, clients, children)
                    if pid == REFUSED:
                        return
                    if pid:
                        children[os.pidfd_open(pid)] = (pid, conn)
                        clients[conn] = pid
                elif isinstance(item, int):
                    pid, conn = children.pop(item)
                    os.close(item)
                    _, status = os.waitpid(pid, 0)
                    clients.pop(conn, None)
                    try:
                        conn.sendall(_HEADER.pack(os.waitstatus_to_exitcode(status) & 0xFF))
                    except OSError:
                        pass
                    conn.close()
                else:
                    # A client that hung up died (Ray killed it): its worker goes too.
                    pid = clients.pop(item)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
    finally:
        listener.close()
        if os.path.exists(socket_path):
            os.unlink(socket_path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(socket_path))


def _load_ray(worker_environment: dict) -> bool:
    """Load Ray's core, Train and Tune in the environment of the job's workers; False if
    forks of this process would then share Ray's ID generator (the server must not serve)."""
    import importlib

    os.environ.clear()
    os.environ.update(worker_environment)
    # pyarrow (under Ray Data) would start a jemalloc thread; the server forks with as few
    # threads as it can.
    os.environ["JE_ARROW_MALLOC_CONF"] = "background_thread:false"
    with ray_adapter.actor_class_ids_from_urandom():
        for module in RAY_IMPORTS:
            importlib.import_module(module)
    return ray_adapter.ids_differ_in_forks()


def _fork_worker(conn: socket.socket, listener, clients, children) -> int | None:
    """Fork the worker `conn` asks for: its pid, None for a malformed request, REFUSED
    if this server cannot serve (the client then starts the worker itself)."""
    header, fds = _recv_with_fds(conn, _HEADER.size)
    if len(header) < _HEADER.size or len(fds) != 3:
        conn.close()
        return None
    request = json.loads(_recv_exactly(conn, _HEADER.unpack(header)[0]))
    if "ray" not in sys.modules and not _load_ray(request["env"]):
        conn.close()
        return REFUSED
    # A forked child cannot use a CUDA context its parent created; the server must never
    # make one (it imports torch but runs nothing on a device).
    assert not _cuda_initialized(), "the warm-start server initialised CUDA; it must not fork"
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):  # a client gone already: its hang-up kills the worker
            conn.sendall(FORKED)
        # One line per worker in the server's log: which node's raylet it serves.
        raylet = next((arg.partition("=")[2] for arg in request["argv"] if arg.startswith("--raylet-name=")), "?")
        print(f"forked worker {pid} for raylet {raylet}", flush=True)
        return pid
    # The child: become the worker Ray asked for, in a session of its own as Ray starts
    # its workers: a raylet ends a worker by SIGKILL to the worker's process group, which
    # would otherwise be this server's (the driver's, and its shell's).
    try:
        os.setsid()
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
        listener.close()
        for other in (conn, *clients):
            other.close()
        for pidfd in children:
            os.close(pidfd)
        for fd in fds:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[WARM_STARTED_ENV] = "1"
        os.chdir(request["cwd"])
        sys.argv = list(request["argv"])
        import runpy

        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - a worker that failed to start must still exit
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _recv_with_fds(conn: socket.socket, size: int) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(size, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if len(data) < size:
        data += _recv_exactly(conn, size - len(data))
    return data, list(fds)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
