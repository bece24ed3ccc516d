"""The `sweep` command (Typer): `run` is the console script's entry point, `app` the
Typer group it runs; each subcommand parses its arguments and calls one module of the
stages."""

from sweeper.cli._app import app, run
from sweeper.cli._process_exit import EXIT_CODES

__all__ = ["EXIT_CODES", "app", "run"]
