"""What a sweep's driver shows on the terminal and what goes to the sweep's `driver.log`.

The terminal gets sweeper's own lines (the sweep and its plan, the forecast, where to look,
the live table, the summary); what the libraries print (Ray's notes, Optuna's study lines,
progress bars, warnings) goes to `<sweep folder>/driver.log`, and with `--verbose` to the
terminal too. Only the libraries' public switches are used: Python logging and warnings,
`optuna.logging`, and documented environment variables, which the driver's processes
inherit. The log is held in memory until the launch has made the sweep's folder
(`write_to`), then written there. A record that cannot be written there (a full disk, a
removed folder) is counted, not reported with Python logging's traceback on the terminal;
one line at the end says how many were lost.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

__all__ = ["QUIET_ENVIRONMENT", "DriverLog", "LogFile", "write_to", "route_ray_logger"]

# Documented switches the libraries read from the environment, in the driver and in the
# processes it starts: transformers' warnings at error level only; no Hugging Face Hub or
# transformers progress bars (transformers follows the Hub's switch); MLflow leaves its
# loggers to the application (they reach driver.log like any other).
QUIET_ENVIRONMENT = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "MLFLOW_CONFIGURE_LOGGING": "false",
}

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_active: "DriverLog | None" = None


class LogFile(logging.FileHandler):
    """driver.log, appended to: a record it cannot write is counted (`unwritten`, with the
    last error) instead of Python logging's "--- Logging error ---" traceback on stderr,
    which on a full disk came before the sweep's own keyed line. The file is opened at the
    first record and, after a failed write, closed and opened again at the next, so that a
    freed disk or a folder made again is written to."""

    def __init__(self, path: Path):
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.unwritten = 0
        self.last_error: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:  # FileHandler opens the file outside StreamHandler's own try
            super().emit(record)
        except Exception:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        self.unwritten += 1
        self.last_error = sys.exc_info()[1]
        stream, self.stream = self.stream, None
        if stream is not None:
            try:
                stream.close()  # flushes what it holds: fails again on a full disk
            except OSError:
                pass

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # a record's failed flush closed the stream already: nothing is held
            pass

    def lost_line(self) -> str | None:
        """One line saying how many records could not be written, and why; None: none."""
        if not self.unwritten:
            return None
        why = getattr(self.last_error, "strerror", None) or str(self.last_error or "")
        return f"note: {self.unwritten} log record(s) could not be written to {self.baseFilename}" + (
            f": {why}" if why else "")


class DriverLog:
    """Entered around a sweep's driver: the libraries' logging goes to a buffer and then to
    driver.log (`verbose`: to the terminal's stderr as well)."""

    def __init__(self, verbose: bool = False):
        self.verbose = verbose
        self.path: Path | None = None
        self.buffer = logging.handlers.MemoryHandler(capacity=10**6, flushLevel=logging.CRITICAL + 1)
        self.buffer.setFormatter(logging.Formatter(FORMAT))
        self.file: LogFile | None = None
        self.terminal: logging.Handler | None = None
        self._saved_env: dict[str, str | None] = {}
        self._saved_level = logging.root.level

    def __enter__(self) -> "DriverLog":
        global _active
        for name, value in QUIET_ENVIRONMENT.items():
            self._saved_env[name] = os.environ.get(name)
            if not self.verbose:
                os.environ.setdefault(name, value)
        logging.root.addHandler(self.buffer)
        if self.verbose:
            self.terminal = logging.StreamHandler(sys.stderr)
            self.terminal.setFormatter(logging.Formatter(FORMAT))
            logging.root.addHandler(self.terminal)
        logging.root.setLevel(logging.INFO)
        logging.captureWarnings(True)  # Python warnings (a library's FutureWarning) as log records
        _active = self
        _route_optuna()
        route_ray_logger()
        if "mlflow" in sys.modules:  # loaded already: MLFLOW_CONFIGURE_LOGGING came too late
            _to_the_handlers_above(logging.getLogger("mlflow"))
        return self

    def write_to(self, path: Path) -> None:
        """From now on into `path` (appended to), with what was held so far."""
        if self.file is not None:
            return
        self.path = path
        self.file = LogFile(path)
        self.file.setFormatter(logging.Formatter(FORMAT))
        self.buffer.setTarget(self.file)
        self.buffer.flush()
        logging.root.removeHandler(self.buffer)
        logging.root.addHandler(self.file)

    def __exit__(self, kind, error, traceback) -> None:
        global _active
        _active = None
        logging.root.removeHandler(self.buffer)
        if self.file is None and kind is not None and not self.verbose and self.buffer.buffer:
            # No sweep folder to keep them in, and the command failed: they may say why.
            sys.stderr.writelines(f"{self.buffer.format(record)}\n" for record in self.buffer.buffer)
        self.buffer.close()
        for handler in (self.file, self.terminal):
            if handler is not None:
                logging.root.removeHandler(handler)
                handler.close()
        lost = self.file.lost_line() if self.file is not None else None
        if lost:  # before the command's summary and its last line
            sys.stderr.write(lost + "\n")
        logging.root.setLevel(self._saved_level)
        logging.captureWarnings(False)
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def write_to(path: Path) -> None:
    """Start writing the active DriverLog (if any) into `path`: the sweep's folder exists."""
    if _active is not None:
        _active.write_to(path)


def route_ray_logger() -> None:
    """Ray's "ray" logger sends to the handlers above (and so to driver.log) instead of its
    own stderr handler, while a DriverLog is active and once Ray is loaded. Called again
    after `import ray` (Ray configures that logger as it loads)."""
    if _active is None or "ray" not in sys.modules:
        return
    _to_the_handlers_above(logging.getLogger("ray"))


def _to_the_handlers_above(logger: logging.Logger) -> None:
    logger.handlers.clear()
    logger.propagate = True


def _route_optuna() -> None:
    """Optuna's study lines ("A new study created ...") through the handlers above."""
    import optuna

    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
