"""How the `sweep` process ends: as Python ends a process, less the interpreter's teardown.

After a command has imported torch, transformers, Ray, MLflow and peft, Python's own
teardown (freeing every module's objects one by one) takes about 2 s on the 2-core
machine after the last line is printed (`python -c "import torch, transformers, ray,
mlflow, peft, optuna"`: 1.9-2.0 s to exit; 0.03-0.06 s through `os._exit`). A user waits
for it after every command, a test suite after each of its ~100 commands. Nothing of ours
needs the teardown: what must happen at exit is registered with `atexit` (Ray's shutdown of
the local cluster, MLflow's and logging's flushes, `weakref.finalize` callbacks).

So `exit_process` does what Python's exit does, in its order, and then `os._exit`:
non-daemon threads joined, the `atexit` callbacks run (last registered first), the
standard streams flushed. `atexit._run_exitfuncs` is CPython's own (undocumented, in every
CPython 3); this module is its one caller, and tests/unit/test_process_exit.py checks the
behaviour relied on: callbacks run in order, logs flushed, threads finished, the status kept.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

__all__ = ["exit_process", "exit_status"]


def exit_status(code: object) -> int:
    """The status Python gives `SystemExit(code)`: None is 0, an int itself, anything else
    printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def exit_process(status: int) -> NoReturn:
    """End the process with `status`, as Python would, without its teardown."""
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(status)
