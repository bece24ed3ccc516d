"""The `sweep` command: the group (`SweepCommands`) turns the errors a user can fix into
keyed one-line messages and an exit status, once for all subcommands (tracebacks with
--debug), and the table below registers the subcommands, which live one module per group
(scaffolding, running, reading, promoting), each parsing its arguments and calling one module."""

from __future__ import annotations

# First: its exit callback is registered before any library's, so that it runs after them.
from sweeper.cli._process_exit import exit_process, exit_status  # isort: skip

import inspect
import os
from typing import NoReturn

import click
import typer
from rich.markup import escape
from typer.core import TyperGroup

import sweeper.cli._environment as environment
import sweeper.cli._promoting as promoting
import sweeper.cli._reading as reading
import sweeper.cli._running as running
import sweeper.cli._scaffolding as scaffolding
from sweeper.cli._common import JSON_COMMAND, errors
from sweeper.errors import SweepFailed
from trainables.errors import InputError

# What a command may raise on purpose, and the exit status it ends with. Each is printed
# as its one-line messages (`lines`, else the message); anything else is a bug and keeps
# its traceback. --debug shows the traceback of these too.
# UserError (the service's) is an InputError (the trial's: data, model folders, tokenizers).
EXIT_STATUS: dict[type[Exception], int] = {InputError: InputError.exit_code, SweepFailed: SweepFailed.exit_code}


class SweepCommands(TyperGroup):
    """The `sweep` group: maps the errors of every subcommand to messages, in one place."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except tuple(EXIT_STATUS) as exc:
            if ctx.params.get("debug"):
                raise
            lines = getattr(exc, "lines", None) or [str(exc)]
            for line in lines:
                # Escaped: a line quotes user input, which may hold brackets.
                errors.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
            if ctx.meta.get(JSON_COMMAND):  # --json: the refusal as a document on stdout too
                from sweeper.output import error_document

                typer.echo(error_document(ctx.meta[JSON_COMMAND], _exit_status(exc), lines))
            raise typer.Exit(_exit_status(exc)) from None


def _exit_status(exc: Exception) -> int:
    return next(status for kind, status in EXIT_STATUS.items() if isinstance(exc, kind))


app = typer.Typer(
    cls=SweepCommands,
    help="Hyperparameter sweeps for LLM fine-tuning: one YAML file, Ray Tune + Optuna + ASHA.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")) -> None:
    # MLflow's artifact download bars would interleave with this command's own output.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


# The subcommands, in the order `sweep --help` lists them.
COMMANDS = [
    (scaffolding.init, None), (running.validate, None), (reading.reference, None), (running.start, None),
    (running.plan, None), (running.resume, None), (running.stop, None), (reading.dashboard, None), (running.submit, None),
    (running.logs, None), (reading.list_sweeps, "list"), (reading.status, None), (promoting.promote, None),
    (promoting.export, None), (reading.report, None), (environment.doctor, None),
]


def help_from_docstring(docstring: str | None) -> str:
    """A command's help: its docstring's paragraphs, each joined into one line, so that the
    terminal's width alone decides where lines break. Typer 0.29's rich help keeps a
    docstring's own line breaks in the command list and in every paragraph after the first
    (`typer.rich_utils._make_command_help`, `_fix_linebreaks`), which broke sentences
    mid-line at the source's wrapping. A paragraph that opens with click's `\\b` is kept
    as written."""
    paragraphs = inspect.cleandoc(docstring or "").split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


for command, name in COMMANDS:
    app.command(name, help=help_from_docstring(command.__doc__))(command)


def run() -> NoReturn:
    """The console script and `python -m sweeper.cli`: the command, then the process's end
    without the interpreter's teardown (sweeper/cli/_process_exit.py)."""
    try:
        app()
        status = 0
    except SystemExit as done:
        status = exit_status(done.code)
    exit_process(status)


if __name__ == "__main__":
    run()
