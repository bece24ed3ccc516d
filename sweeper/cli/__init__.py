"""The `sweep` command (Typer): `run` is the console script's entry point, `app` the
Typer group it runs; each subcommand parses its arguments and calls one module of the
stages."""

from sweeper.cli._app import app, run

__all__ = ["app", "run"]
