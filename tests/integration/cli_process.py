"""`sweep ARGS` for the integration tests, forked from one process that has imported the
CLI's stack once, instead of a new interpreter importing it for every command.

Why: a `sweep` command spends its first 5-9 CPU-seconds importing torch, transformers, Ray
and MLflow, and the suite runs over a hundred of them on two cores. The
zygote (`python -m tests.integration.cli_process SOCKET`, one per test run) imports what
the commands import, then serves: for each command a client sends its arguments,
environment, working directory and standard streams over a Unix socket, and the zygote
forks a child that runs `python -m sweeper.cli ARGS` as that command's own process: its own
pid and session (as `start_new_session=True`), which a test signals, kill -9s or walks the
children of; the exit status Python would give it (sweeper/cli/_process_exit.py's exit).
A user's `sweep` is always a new interpreter, and tests/integration/test_examples.py runs
the scripts users run that way.

What a forked child cannot see is an environment variable a library reads once, when it is
imported (Ray's settings, PYTHONUNBUFFERED, HF_HOME, ...). So a command whose environment
differs from the zygote's in anything but the keys read at call time (`READ_AT_CALL_TIME`)
runs as a plain subprocess, as does every command while the zygote is still importing or
when it is gone.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

# What `sweep start`, `resume`, `plan`, `report`, `promote` and the read-only commands
# import between them (`python -X importtime -m sweeper.cli start`), so that none imports
# anything heavy after the fork.
PREIMPORTS = (
    "sweeper.cli._app",
    "sweeper.cli._running",
    "sweeper.cli._reading",
    "sweeper.cli._promoting",
    "sweeper.run._launch",
    "sweeper.run._driver",
    "sweeper.run._trial",
    "sweeper.run._watchdog",
    "sweeper.run._from_storage",
    "sweeper.plan._checks",
    "sweeper.plan._command",
    "sweeper.search._searcher",
    "sweeper.search._warm_start",
    "sweeper.track._tracker",
    "sweeper.track._console",
    "sweeper.track._summary",
    "sweeper.track._store",
    "sweeper.views",
    "sweeper.cluster.jobs",
    "sweeper.promote._registry",
    "sweeper.promote._export",
    "trainables.models",
    "trainables.data",
    "transformers.models.llama.modeling_llama",
    "mlflow.store.tracking.sqlalchemy_store",
)
# Environment keys a command may have other than the zygote's and still be forked: each is
# read when it is used, not when a module is imported.
# - AWS_ by botocore's clients, MLFLOW_S3_ENDPOINT_URL by MLflow's S3 artifact client
#   (`MLFLOW_S3_ENDPOINT_URL.get()` when it makes one);
# - TUNE_GLOBAL_CHECKPOINT_S by Tune's controller when a sweep starts;
# - MLFLOW_TRACKING_URI and SWEEPER_ by our code at the call;
# - and what the test process sets in its own environment as it runs: PYTEST_CURRENT_TEST
#   (pytest, for each test); torch's inductor cache folder and tensor pointer (set at a
#   test's first compile); MLflow's telemetry session; PYTORCH_NVML_BASED_CUDA_CHECK
#   (deepspeed's import; torch reads it at each `torch.cuda.is_available()`); and
#   CRC32C_SW_MODE (tensorboardX's import; read by crc32c's, which the zygote does not
#   do, so a command imports it with its own environment, as a new interpreter would).
# Not COLUMNS: sweeper/cli/_common.py's consoles take their width when imported, so the
# zygote runs with the tests' COLUMNS (`Zygote`). Not HOME: huggingface_hub and others
# derive their cache folders from it at import. Not RAY_AUTH_TOKEN_PATH: tried, a forked
# driver joining a token cluster with it was refused ("RAY_AUTH_MODE is currently
# 'disabled'"), Ray having settled its auth mode when the zygote imported it.
READ_AT_CALL_TIME = (
    "AWS_", "MLFLOW_S3_ENDPOINT_URL", "TUNE_GLOBAL_CHECKPOINT_S", "MLFLOW_TRACKING_URI",
    "SWEEPER_", "PYTEST_", "TORCHINDUCTOR_CACHE_DIR", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
    "_MLFLOW_TELEMETRY_SESSION_ID", "PYTORCH_NVML_BASED_CUDA_CHECK", "CRC32C_SW_MODE",
)
SOCKET_ENV = "SWEEPER_TEST_CLI_SOCKET"
_STATUS = struct.Struct("!i")


# ---- the zygote ------------------------------------------------------------------------


def serve(socket_path: str) -> None:
    """Import, then fork a child per request until the test run (our parent) ends."""
    for module in PREIMPORTS:
        importlib.import_module(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path + ".tmp")
    listener.listen(16)
    os.rename(socket_path + ".tmp", socket_path)  # clients connect only once all is imported
    parent = os.getppid()
    children: dict[int, socket.socket] = {}  # child pid -> its client's connection
    while os.getppid() == parent:
        readable, _, _ = select.select([listener, *children.values()], [], [], 0.05)
        for sock in readable:
            if sock is listener:
                connection, _ = listener.accept()
                pid = _fork_command(connection, listener, children)
                if pid:
                    children[pid] = connection
            elif not sock.recv(16):  # the client is gone: so is its command
                pid = next(pid for pid, connection in children.items() if connection is sock)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        _reap(children)


def _fork_command(connection: socket.socket, listener: socket.socket, children: dict) -> int | None:
    connection.settimeout(10)  # a client sends its request at once: one that does not cannot stall the others
    try:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    except OSError:
        message = b""
    if not message:
        connection.close()
        return None
    connection.settimeout(None)
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    in_session, session_made = os.pipe()
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in children.values():
            other.close()
        connection.close()
        os.close(in_session)
        os.setsid()
        os.close(session_made)  # the client has the pid once the session exists (killpg works)
        _run_command(request, fds)  # never returns
    os.close(session_made)
    os.read(in_session, 1)
    os.close(in_session)
    for fd in fds:
        os.close(fd)
    connection.sendall(_STATUS.pack(pid))
    return pid


def _run_command(request: dict, fds: list[int]) -> None:
    """In the child: become `python -m sweeper.cli ARGS` in the client's session of streams."""
    import runpy
    import traceback

    from sweeper.cli._process_exit import exit_process

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [sys.argv[0], *request["args"]]  # run_module puts the module's file first
    try:
        # As `python -m sweeper.cli`: __main__ is sweeper.cli.__main__ while it runs, which a
        # child that multiprocessing spawns (the calibration's copies) does not run again.
        # Its `run()` ends the process itself (sweeper/cli/_process_exit.py), status included.
        runpy.run_module("sweeper.cli", run_name="__main__", alter_sys=True)
    except SystemExit:  # `run()`'s own end: Python's exit, which ends the child with its status
        raise
    except BaseException:  # noqa: BLE001 - what escapes before run() catches anything: as Python, the traceback
        traceback.print_exc()
    exit_process(1)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.sendall(_STATUS.pack(status))
            connection.close()


# ---- the test run's side -----------------------------------------------------------------


class Zygote:
    """A zygote process: its environment is the test run's, with `extra` over it."""

    def __init__(self, folder: Path, extra: dict, generation: int = 0):
        self.folder, self.extra = folder, extra
        self.socket_path = str(folder / f"cli{generation}.sock")
        self.env = {**os.environ, **extra}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.cli_process", self.socket_path],
            cwd=Path(__file__).resolve().parents[2], env=self.env, stdin=subprocess.DEVNULL, start_new_session=True,
        )

    def end(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(self.socket_path):
            assert self.process.poll() is None, "the test zygote exited while importing"
            assert time.monotonic() < deadline, f"the test zygote did not import the CLI's stack in {timeout_s} s"
            time.sleep(0.1)

    def unsafe_differences(self, env: dict) -> set[str]:
        """The keys in which `env` differs from the zygote's, read when a module is imported."""
        differing = {key for key in env.keys() | self.env.keys() if env.get(key) != self.env.get(key)}
        return {key for key in differing if not key.startswith(READ_AT_CALL_TIME)}

    def serves(self, env: dict) -> bool:
        """Whether a command with environment `env` may be forked from the zygote now."""
        if self.process.poll() is not None or not os.path.exists(self.socket_path):
            return False
        return not self.unsafe_differences(env)


# The run's zygotes, the last the one in use. The test run's own environment changes as it
# goes (a library imported in a test sets a variable, as deepspeed does
# PYTORCH_NVML_BASED_CUDA_CHECK): then a new zygote starts with it, while the earlier ones
# stay until the end for the commands they forked (each reports its children's status).
_zygotes: list[Zygote] = []
MAX_ZYGOTES = 4
COMMANDS = {"forked": 0, "new interpreter": 0}  # how the run's commands started (its summary)
UNFORKED_FOR: collections.Counter = collections.Counter()  # environment keys that kept commands from the zygote


def start_zygote(folder: Path, extra: dict) -> Zygote:
    """The first zygote of this test run; `extra` is what the tests' commands add to its
    environment (COLUMNS)."""
    _zygotes.append(Zygote(folder, extra))
    return _zygotes[-1]


def end_zygotes() -> None:
    for zygote in _zygotes:
        zygote.end()


def zygotes_started() -> int:
    return len(_zygotes)


def ready_zygote(timeout_s: float) -> Zygote:
    """The zygote that forks the test run's next command, once it has imported."""
    _zygote_for({**os.environ, **_zygotes[-1].extra})
    _zygotes[-1].wait_ready(timeout_s)
    return _zygotes[-1]


def _zygote_for(env: dict) -> Zygote | None:
    """The zygote to fork a command with environment `env` from, if any; starts a new one
    (for later commands) when the test run's environment has moved from the current one's."""
    if not _zygotes:
        return None
    current = _zygotes[-1]
    if current.serves(env):
        return current
    UNFORKED_FOR.update(current.unsafe_differences(env))
    if current.unsafe_differences({**os.environ, **current.extra}) and len(_zygotes) < MAX_ZYGOTES:
        _zygotes.append(Zygote(current.folder, current.extra, generation=len(_zygotes)))
    return None


class ForkedCommand:
    """A `sweep` command forked by the zygote, with what tests use of `subprocess.Popen`."""

    def __init__(self, args: list[str], connection: socket.socket, stdout=None, stderr=None):
        self.args = args
        self.returncode: int | None = None
        self.stdout = stdout
        self.stderr = stderr
        self._connection = connection
        self._readers: list[_Reader] | None = None
        self.pid = _STATUS.unpack(connection.recv(_STATUS.size))[0]

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(BlockingIOError):
                self._take_status(self._connection.recv(_STATUS.size, socket.MSG_DONTWAIT))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._connection], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._take_status(self._connection.recv(_STATUS.size))
        return self.returncode

    def _take_status(self, message: bytes) -> None:
        if not message:  # the zygote itself is gone
            raise RuntimeError(f"the test zygote ended before `{' '.join(self.args)}` did")
        self.returncode = os.waitstatus_to_exitcode(_STATUS.unpack(message)[0])
        self._connection.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple:
        """Each stream read to its end by a thread of its own (as `subprocess` does on
        Windows), so that a timeout leaves the readers to a later call."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._readers is None:
            self._readers = [_Reader(stream) for stream in (self.stdout, self.stderr)]
        for reader in self._readers:
            reader.thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return tuple(reader.text for reader in self._readers)


class _Reader:
    def __init__(self, stream):
        self.text = None
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        if stream is not None:
            with stream:
                self.text = stream.read()


def start(args: list[str], *, cwd, env: dict, merge_stderr: bool = True, quiet: bool = False):
    """`python -m sweeper.cli ARGS` running, as `subprocess.Popen(..., text=True)` with its
    output on a pipe (`stdout`, stderr merged into it unless `merge_stderr` is False) or,
    `quiet`, to /dev/null; forked from the zygote where it can be."""
    command = [sys.executable, "-m", "sweeper.cli", *args]
    connection = _connect(env)
    COMMANDS["forked" if connection else "new interpreter"] += 1
    if connection is None:
        if quiet:
            return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True,
                                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE)
    devnull = os.open(os.devnull, os.O_RDWR)
    if quiet:
        child_fds, ours = [devnull, devnull, devnull], []
    else:
        out_read, out_write = os.pipe()
        err_read, err_write = (out_read, out_write) if merge_stderr else os.pipe()
        child_fds, ours = [devnull, out_write, err_write], [out_read] + ([] if merge_stderr else [err_read])
    try:
        socket.send_fds(connection, [json.dumps({"args": list(args), "cwd": str(cwd), "env": env}).encode()], child_fds)
        streams = [open(fd, encoding="utf-8", errors="replace") for fd in ours]  # noqa: SIM115 - the caller's pipe
        return ForkedCommand(command, connection, *streams)
    finally:
        for fd in set(child_fds):
            os.close(fd)


def _connect(env: dict) -> socket.socket | None:
    """A connection to the zygote, if it is ready and may fork a command with `env`."""
    zygote = _zygote_for(env)
    if zygote is None:
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        connection.connect(zygote.socket_path)
    except OSError:  # still importing, or gone
        connection.close()
        return None
    return connection


def run(args: list[str], *, cwd, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`subprocess.run([python, -m, sweeper.cli, *args], capture_output=True, text=True)`,
    forked from the zygote where it can be."""
    process = start(args, cwd=cwd, env=env, merge_stderr=False)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


if __name__ == "__main__":
    serve(sys.argv[1])
