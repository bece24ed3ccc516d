"""Whether a folder can be created and written: the sweep folder, a storage.uri folder,
the tracking store's folder, a report's `--out`. Tried with a probe folder that is made and
removed, since `os.access` answers yes to root on a folder such as /proc that takes no
new files."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

__all__ = ["folder_creation_problem", "write_refused"]


def folder_creation_problem(folder: Path) -> str | None:
    """Why `folder` (absent, or present) cannot be created and written, or None: tried in
    it, or in its nearest existing parent."""
    if folder.exists():
        if not folder.is_dir():
            return f"{folder} is a file, not a folder"
        refused = write_refused(folder)
        return f"cannot write in {folder}: it {refused}" if refused else None
    ancestor = folder.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create {folder}: {ancestor} is a file"
    refused = write_refused(ancestor)
    return f"cannot create {folder}: {ancestor} {refused}" if refused else None


def write_refused(folder: Path) -> str | None:
    """How the existing folder `folder` refuses new files ("is read-only", "refuses new
    files (No such file or directory)"), or None when a probe folder can be made and
    removed in it."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return "is read-only"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".sweeper-write-check-", dir=folder))
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return "is read-only"
        return f"refuses new files ({exc.strerror or exc})"
    return None
