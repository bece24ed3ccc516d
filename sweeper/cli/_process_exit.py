"""How the `sweep` process ends: Python's own exit, less the interpreter's teardown.

After a command has imported torch, transformers, Ray, MLflow and peft, Python's teardown
(freeing every module's objects one by one) takes seconds after the last line is printed,
which a user waits for after every command. Nothing of ours needs it: what must happen at
exit is registered with `atexit` (Ray's shutdown of the local cluster, MLflow's and
logging's flushes, `weakref.finalize` callbacks).

So `exit_process` leaves by Python's normal exit (`sys.exit`): non-daemon threads joined,
the `atexit` callbacks run, last registered first. This module registers one callback
itself, when it is imported, before the command imports the libraries that register
theirs (sweeper/cli/_app.py imports it first): it runs after all of theirs, flushes the
logs and standard streams, and ends the process with the status through `os._exit`,
skipping only the teardown. Only the public `atexit` and `os._exit` are used; a process
that ends by any other way than `exit_process` (an uncaught exception) gets Python's
whole exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_process", "exit_status"]

# The status `exit_process` ends with; None: not ending through it (Python's whole exit).
_ending_with: list[int] = []


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
    _ending_with[:] = [status]
    sys.exit(status)


def _end_without_teardown() -> None:
    """The last `atexit` callback: every other has run."""
    if not _ending_with:
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(_ending_with[0])


atexit.register(_end_without_teardown)
