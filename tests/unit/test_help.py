"""`sweep --help` and every subcommand's help at 80 columns: no sentence is broken where
the source's docstring happened to wrap.

The check, per rendered help: every paragraph a user wrote (a command's docstring
paragraphs, each argument's and option's help) is found in the output, its words in order,
on consecutive lines that start at the same column. Where one of those lines ends inside
the paragraph, the break must be one the width forced: the next word would not have fit on
that line, judged against the widest line the same paragraph has (a width the column
demonstrably holds). A break the width did not force is the source's line break showing.
"""

from __future__ import annotations

import inspect
import re

import pytest
import typer
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.cli._app import COMMANDS

ANSI = re.compile(r"\x1b\[[0-9;]*m")
WIDTH = 80


def _render(*args: str) -> list[str]:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    lines = [ANSI.sub("", line).rstrip() for line in result.output.splitlines()]
    assert max(len(line) for line in lines) <= WIDTH, "the help was not rendered at 80 columns"
    return lines


def _segment(line: str, column: int) -> str:
    """The text of `line` from `column`, without a panel's right border."""
    return line[column:].rstrip().removesuffix("│").rstrip()


def unforced_breaks(lines: list[str], paragraph: str) -> list[str]:
    """The rendered lines of `paragraph` that end where the next word would have fit; an
    error if its words are not found in order."""
    text = " ".join(paragraph.split())
    start = " ".join(text.split()[:4])
    found = [(row, line.index(start)) for row, line in enumerate(lines) if start in line]
    assert found, f"not in the help: {text!r}"
    row, column = found[0]
    segments, rest = [], text
    while rest:
        assert row < len(lines), f"the help ends inside {text!r}"
        segment = _segment(lines[row], column)
        piece = segment[: len(rest)] if rest.startswith(segment[: len(rest)]) else None
        assert piece, f"{text!r}: expected {rest[:40]!r}... at line {lines[row]!r}"
        segments.append(piece)
        rest = rest[len(piece):].lstrip(" ")
        row += 1
    widest = max(len(s) for s in segments)
    broken = []
    for piece, following in zip(segments, segments[1:]):
        next_word = following.split(" ")[0]
        if len(piece) + 1 + len(next_word) <= widest:
            broken.append(f"{piece!r} / {next_word!r}")
    return broken


def _paragraphs(command) -> list[str]:
    written = [p for p in inspect.cleandoc(command.help or "").split("\n\n") if p.strip()]
    return written + [p.help for p in command.params if getattr(p, "help", None) and p.name != "help"]


def _commands():
    group = typer.main.get_command(app)
    context = typer.Context(group, info_name="sweep")
    return group, [(name, group.get_command(context, name)) for name in group.list_commands(context)]


def test_the_command_list_breaks_no_sentence():
    group, commands = _commands()
    lines = _render()
    broken = {}
    paragraphs = [group.help, *(p.help for p in group.params if p.name != "help")]
    paragraphs += [inspect.cleandoc(command.help).split("\n\n")[0] for _, command in commands]
    for paragraph in paragraphs:
        broken[paragraph[:30]] = unforced_breaks(lines, paragraph)
    assert not {k: v for k, v in broken.items() if v}


@pytest.mark.parametrize("name", [name or command.__name__ for command, name in COMMANDS])
def test_a_commands_help_breaks_no_sentence(name):
    _, commands = _commands()
    command = dict(commands)[name]
    lines = _render(name)
    broken = {p[:30]: unforced_breaks(lines, p) for p in _paragraphs(command)}
    assert not {k: v for k, v in broken.items() if v}


def test_the_check_finds_a_break_the_source_made():
    """The check itself: the command list as typer 0.29 printed it from a docstring's own
    line breaks (before the commands' help was built from their paragraphs)."""
    lines = [
        "│ init       Write a commented sweep YAML for a model and data: a search space │",
        "│            from published                                                    │",
        "│            guidance, max_length, batch and steps from the data's tokens, and │",
        "│            the memory forecast for --gpu.                                    │",
    ]
    paragraph = ("Write a commented sweep YAML for a model and data: a search space from published\n"
                 "guidance, max_length, batch and steps from the data's tokens, and the memory forecast for --gpu.")
    assert unforced_breaks(lines, paragraph) == ["'from published' / 'guidance,'"]


BENCHMARK_FIGURE = re.compile(r"\bMFU\b|\d(\.\d+)?x (faster|slower)|\bon an? [AH]\d00\b", re.I)


def test_help_and_the_yaml_reference_quote_no_benchmark():
    """Figures stay in benchmarks/README.md: a key's description says what it does."""
    from sweeper.spec import markdown_reference

    texts = [markdown_reference(), "\n".join(_render())]
    texts += ["\n".join(_render(name)) for name, _ in _commands()[1]]
    quoted = [match.group(0) for text in texts for match in BENCHMARK_FIGURE.finditer(text)]
    assert quoted == []
