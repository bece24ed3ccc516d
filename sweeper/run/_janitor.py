"""What the driver does with finished trials besides booking them (`sweeper/run/_driver.py`
books them in `sweeper.track._book`): the adapter janitor keeps disk use bounded, and
`error_reason` says in one line why a failed trial failed."""

from __future__ import annotations

import math
from pathlib import Path

from sweeper.cluster import storage
from sweeper.track import SweepBook, TrialRecord
from sweeper.names import TrialState

__all__ = ["AdapterJanitor", "error_reason", "trial_error", "training_loop_error", "WORKER_DIED"]


class AdapterJanitor:
    """Bounds disk use: once a trial finishes, only the adapters of the best
    `search.keep_best_adapters` finished trials are kept (completed ones first); running
    trials keep their latest checkpoint (Ray Train keeps one per trial). A listener of
    the driver callback (sweeper/run/_driver.py)."""

    def __init__(self, book: SweepBook, keep_best: int):
        self.book, self.keep_best = book, keep_best
        # Deleted already: each finish deletes only the adapters that newly fell out of
        # the best (deleting every one again cost each finish O(trials) storage calls).
        self.deleted: set[str] = set()

    def trial_finished(self, record: TrialRecord) -> None:
        self._sweep()

    def _sweep(self) -> None:
        sign = 1 if self.book.goal == "minimize" else -1
        # Confirmation reruns keep their adapters: the winner's best one is what is promoted.
        finished = [t for t in self.book.trials.values() if t.finished and t.checkpoint_path and t.confirms is None]
        ranked = sorted(
            finished,
            key=lambda t: (
                t.state != TrialState.COMPLETED,
                t.last(self.book.metric) is None or not math.isfinite(t.last(self.book.metric)),
                sign * (t.last(self.book.metric) or 0.0),
            ),
        )
        for record in ranked[self.keep_best :]:
            if record.checkpoint_path not in self.deleted:
                storage.delete(record.checkpoint_path)  # a folder, or s3://... (storage.uri)
                self.deleted.add(record.checkpoint_path)


# Where Ray keeps the exception it wraps: Train's WorkerGroupError (per worker rank),
# ControllerError, its health-check failure (a worker that died), and Ray's RayTaskError.
_WRAPPED_ERROR_ATTRIBUTES = ("worker_failures", "controller_failure", "health_check_failure", "cause")
WORKER_DIED = "a worker process died (killed, out of memory, or crashed)"


def trial_error(trial) -> BaseException | None:
    """The exception a failed Tune trial ended with, as Tune pickled it (a RayTaskError
    around what the trial raised). Tune writes it locally before calling back; the synced
    copy (`get_pickled_error`) may not exist yet."""
    import ray.cloudpickle

    path = Path(trial.pickled_error_file) if trial.pickled_error_file else None
    if path is None or not path.is_file():
        return trial.get_pickled_error()
    with path.open("rb") as file:
        return ray.cloudpickle.load(file)


def training_loop_error(error: BaseException | None) -> BaseException | None:
    """The exception the training loop itself raised, found by walking Ray's wrappers down
    (the lowest rank's, when several workers failed), or Ray's error for a process that
    died; `error` itself when it wraps nothing."""
    from ray.exceptions import RayActorError

    seen: set[int] = set()
    while error is not None and id(error) not in seen and not isinstance(error, RayActorError):
        seen.add(id(error))
        inner = None
        for attribute in _WRAPPED_ERROR_ATTRIBUTES:
            inner = getattr(error, attribute, None)
            if isinstance(inner, dict):
                inner = inner[min(inner)] if inner else None
            if isinstance(inner, BaseException):
                break
        if not isinstance(inner, BaseException):
            return error
        error = inner
    return error


def error_reason(error: BaseException | None) -> str:
    """One line for why a trial failed: the training loop's own 'SomeError: message', or
    that a worker process died."""
    from ray.exceptions import RayActorError

    error = training_loop_error(error)
    if error is None:
        return "unknown error (see the trial's error file)"
    if isinstance(error, RayActorError):
        return WORKER_DIED
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0] if message else ''}"[:200]
