"""Errors a user can fix. The CLI prints them as one line each and exits 2; anything
else is a bug and keeps its traceback (shown with --debug)."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input: a YAML key, a CLI argument, a file, a cluster
    that cannot host the sweep. `lines` holds one keyed message per problem."""

    exit_code = 2

    def __init__(self, *lines: str):
        self.lines = [line for line in lines if line]
        super().__init__("\n".join(self.lines))


class SweepFailed(Exception):
    """The sweep ran but produced nothing usable (no trial completed). Exit status 1."""

    exit_code = 1
