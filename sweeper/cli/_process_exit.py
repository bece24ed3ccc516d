"""How the `sweep` process ends: Python's own exit, less the interpreter's teardown.

Once a command has imported torch, transformers, Ray, MLflow and peft, Python's teardown
(freeing every module's objects) takes seconds after the last line is printed, and nothing
of ours needs it: what must happen at exit is registered with `atexit`. `exit_process`
leaves by `sys.exit` (threads joined, `atexit` callbacks run, last registered first); the
callback this module registers when imported, before any library's (sweeper/cli/_app.py
imports it first), runs last, flushes logs and streams and ends the process with
`os._exit`. A process that ends any other way gets Python's whole exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import NoReturn

__all__ = ["EXIT_CODES", "exit_process", "exit_status"]

# Every command's exit status, and what each means (docs/reference/cli.md shows this table).
EXIT_CODES: dict[int, str] = {
    0: "The command did its job; for `sweep start` and `sweep resume`: the sweep ended and at least one trial "
       "completed.",
    1: "A sweep ran and did not finish: no trial completed, or a fault stopped it (the last line says which and how "
       "to go on: `sweep resume NAME`); also a bug, with its traceback.",
    2: "Your input was refused before anything ran: one keyed line per problem (YAML key or argument, the value "
       "given, what would be valid), or click's usage line for a wrong option.",
    130: "The sweep was stopped by `sweep stop` or Ctrl-C (SIGINT): its trials were stopped and recorded; "
         "`sweep resume NAME` continues it.",
    143: "The sweep was stopped by SIGTERM (a scheduler or `kill`), as for 130: `sweep resume NAME` continues it.",
}

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
