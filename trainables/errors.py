"""Errors in input a user can fix, raised where trials read it (data files, model
folders, tokenizers) and by the config schema. Pure Python: no torch, Ray or sweeper.

The `sweep` CLI prints an `InputError` as one line per problem and exits with status 2;
`sweeper.errors.UserError` is the same error raised by the service itself.
"""

from __future__ import annotations

__all__ = ["InputError", "FieldProblems"]


class InputError(Exception):
    """A mistake in the user's input. `lines` holds one keyed message per problem
    ("data.train: /x.jsonl line 3: invalid JSON (...)")."""

    exit_code = 2

    def __init__(self, *lines: str):
        self.lines = [line for line in lines if line]
        super().__init__("\n".join(self.lines))

    def where(self, context: str) -> "InputError":
        """The same error with `context` added to each line: "(in the calibration run)"."""
        self.lines = [f"{line} ({context})" for line in self.lines]
        self.args = ("\n".join(self.lines),)
        return self


class FieldProblems(ValueError):
    """Raised by a schema validator that checks several fields together. `problems`
    holds (key, message) pairs, the key dotted and relative to the model being validated
    ("eval_every", "search.metric"). Pydantic reports the error at that model's location
    with this exception in its context; the loader turns every pair into its own keyed
    line (location + key)."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{key}: {message}" for key, message in self.problems))
