"""The `sweep` command (Typer): `app` is the console script's entry point; each
subcommand parses its arguments and calls one module of the stages."""

from sweeper.cli.app import app

__all__ = ["app"]
