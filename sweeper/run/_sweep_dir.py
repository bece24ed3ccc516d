"""The sweep's folder and what lies in it: made new (never over an existing sweep unless
asked), the files published beside remote storage, and the
pid of the driver running the sweep (`sweep stop` signals it, `sweep resume` refuses a
sweep that still has one)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from sweeper.cluster import storage
from sweeper.errors import UserError
from sweeper.search import study_file
from sweeper.spec import spec_to_yaml, SweepSpec

__all__ = [
    "refuse_existing_sweep", "prepare_sweep_dir", "PUBLISHED_FILES", "publish_sweep_files",
    "DRIVER_PID_FILE", "DRIVER_LOG", "running_driver_pid",
    "refuse_if_running", "refuse_if_read_only", "stop_sweep",
]


def refuse_existing_sweep(spec: SweepSpec, overwrite: bool) -> None:
    """An existing sweep is never replaced unless asked (checked before Ray starts)."""
    sweep_dir = spec.sweep_dir
    if not overwrite and _sweep_files(sweep_dir):
        raise UserError(
            f"name: a sweep named {spec.name!r} already exists in {sweep_dir}; "
            f"continue it with sweep resume {spec.name}, pick a new name, or pass --overwrite to replace it"
        )


def prepare_sweep_dir(spec: SweepSpec, overwrite: bool) -> Path:
    """The sweep's folder, new. An existing sweep is never deleted unless asked."""
    refuse_existing_sweep(spec, overwrite)
    sweep_dir = spec.sweep_dir
    for path in _sweep_files(sweep_dir):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "sweep.yaml").write_text(spec_to_yaml(spec_as_started(spec)))
    return sweep_dir


def spec_as_started(spec: SweepSpec) -> SweepSpec:
    """The spec as `sweep resume` reads it back: with its folder, so that `--sweep-dir`
    works from any directory, and its first rung as it ran, so that a later version's
    default for the first rung does not move the rungs of a sweep it resumes."""
    early_stopping = spec.early_stopping.model_copy(update={"grace_period": spec.grace_period()})
    return spec.model_copy(update={"output_dir": spec.sweep_dir, "early_stopping": early_stopping})


# What `sweep promote` and `sweep resume` need from a sweep besides its Tune state and
# checkpoints, copied beside them when storage.uri is not the sweep folder.
PUBLISHED_FILES = ("sweep.yaml", "tokenizer")


def publish_sweep_files(spec: SweepSpec) -> None:
    if spec.storage_uri == str(spec.sweep_dir):
        return
    for name in PUBLISHED_FILES:
        storage.upload(spec.sweep_dir / name, storage.join(spec.storage_uri, name))


def _sweep_files(sweep_dir: Path) -> list[Path]:
    """What a sweep left in its folder."""
    return list(sweep_dir.iterdir()) if sweep_dir.is_dir() else []


DRIVER_PID_FILE = "driver.pid"
# What the driver noticed while the sweep ran (sweeper/run/_watchdog.py: what the cluster
# waited on when no trial reported for a while), appended to by each start and resume.
DRIVER_LOG = "driver.log"


def running_driver_pid(spec: SweepSpec) -> int | None:
    """The pid of the live `sweep start/resume` process driving this sweep, if any."""
    pid_file = spec.sweep_dir / DRIVER_PID_FILE
    if not pid_file.is_file():
        return None
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass
    return pid


def refuse_if_running(spec: SweepSpec) -> None:
    pid = running_driver_pid(spec)
    if pid is not None:
        raise UserError(f"NAME: sweep {spec.name!r} is still running (driver pid {pid}); stop it first: sweep stop {spec.name}")


def stop_sweep(spec: SweepSpec, timeout_s: float = 300) -> int:
    """Ask the sweep's driver to stop (SIGINT: Tune stops the trials and saves its
    state), then wait for it to close its runs and exit. Returns the driver's pid."""
    pid = running_driver_pid(spec)
    if pid is None:
        raise UserError(f"NAME: sweep {spec.name!r} is not running (no live driver for {spec.sweep_dir})")
    os.kill(pid, signal.SIGINT)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if running_driver_pid(spec) != pid:
            return pid
        time.sleep(0.5)
    raise UserError(f"NAME: sweep {spec.name!r} (driver pid {pid}) did not stop within {timeout_s:.0f} s")


def refuse_if_read_only(sweep_dir: Path) -> None:
    """Resume writes the Tune state, checkpoints and the Optuna study into the sweep folder."""
    from sweeper.folders import write_refused

    folders = [sweep_dir, sweep_dir / "tune", sweep_dir / "trials"]
    read_only = [path for path in folders if path.is_dir() and write_refused(path)]
    study = study_file(sweep_dir)
    read_only += [study] if study.exists() and not os.access(study, os.W_OK) else []
    if read_only:
        raise UserError(
            f"NAME: cannot resume: {read_only[0]} is read-only; resume writes into the sweep folder "
            f"{sweep_dir}; make it writable (chmod -R u+w, or remount it read-write)"
        )
