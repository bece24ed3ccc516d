"""Errors a user can fix. The CLI prints them as one line each and exits 2; anything
else is a bug and keeps its traceback (shown with --debug)."""

from __future__ import annotations

from trainables.errors import InputError


class UserError(InputError):
    """A mistake in the user's input found by the service: a YAML key, a CLI argument, a
    file, a cluster that cannot host the sweep. `lines` holds one keyed message per
    problem. Errors found where trials read their input (data, models, tokenizers) are
    its base class, `trainables.errors.InputError`; the CLI prints both alike."""


class SweepFailed(Exception):
    """The sweep ran but produced nothing usable (no trial completed). Exit status 1."""

    exit_code = 1
