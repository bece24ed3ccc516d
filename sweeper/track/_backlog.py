"""The tracking server away: training goes on, and what the driver could not log waits in a
backlog beside the sweep, logged in its order once the server answers again.

`DeferringClient` stands in front of the tracker's MlflowClient for an HTTP server. A write
that finds the server away (MLflow's client gave up after its retries) is kept, with the
writes after it, and the driver's Tune loop goes on; at most every `PROBE_EVERY_S` a write
tries the server again, and once it answers the backlog is written in order (runs created
meanwhile get their ids then). The backlog is also a file in the sweep's folder, which
`sweep resume` writes first. `SHORT_RETRIES`: the driver's default for MLflow's HTTP
retries (unless the user set them), so that a write blocks seconds, not minutes, before it
joins the backlog (docs/guides/failures.md).
"""

from __future__ import annotations

import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DeferringClient", "Outage", "server_away", "replay_backlog", "BACKLOG_FILE"]

BACKLOG_FILE = "tracking_backlog.pkl"
PROBE_EVERY_S = 15.0
SHORT_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
# What MLflow's REST client raises when the server does not answer (rest_utils.http_request).
AWAY_TEXTS = ("failed with exception", "failed with timeout exception", "Max retries exceeded", "Connection refused")
# The client's writes that a backlog may hold; reads (search_runs, get_metric_history) go straight through.
WRITES = frozenset({"create_run", "log_batch", "set_terminated", "update_run", "set_tag", "log_text", "delete_run"})


def server_away(error: BaseException) -> bool:
    """Whether `error` is MLflow's client saying the tracking server did not answer."""
    import requests
    from mlflow.exceptions import MlflowException

    if isinstance(error, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        return True  # an artifact upload's own request
    return isinstance(error, MlflowException) and any(text in str(error) for text in AWAY_TEXTS)


@dataclass
class Outage:
    started: float
    ended: float | None = None
    writes: int = 0  # kept in the backlog, all logged once it ended

    @property
    def seconds(self) -> float:
        return (self.ended or time.time()) - self.started


class _PendingRun:
    """What `create_run` returns while the server is away: the run's id is a placeholder,
    replaced by the real one in every later call once the run is made."""

    def __init__(self, run_id: str):
        self.info = type("Info", (), {"run_id": run_id})()


@dataclass
class DeferringClient:
    client: object  # MlflowClient
    backlog_path: Path
    pending: list[tuple[str, tuple, dict]] = field(default_factory=list)
    outages: list[Outage] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)  # placeholder -> the run's real id, once made
    last_try: float = 0.0
    runs_kept: int = 0  # runs created while the server was away, for their placeholders

    @property
    def away(self) -> bool:
        return bool(self.outages) and self.outages[-1].ended is None

    def __getattr__(self, name):
        attribute = getattr(self.client, name)
        if name not in WRITES:
            return attribute
        return lambda *args, **kwargs: self._write(name, args, kwargs)

    def _write(self, name: str, args: tuple, kwargs: dict):
        if self.away and (time.time() - self.last_try < PROBE_EVERY_S or not self.flush()):
            return self._keep(name, args, kwargs)
        try:
            return getattr(self.client, name)(*_named(args, self.ids), **_named(kwargs, self.ids))
        except Exception as error:
            if not server_away(error):
                raise
            self.outages.append(Outage(started=time.time()))
            self.last_try = time.time()
            return self._keep(name, args, kwargs)

    def _keep(self, name: str, args: tuple, kwargs: dict):
        self.outages[-1].writes += 1
        result = None
        if name == "create_run":
            self.runs_kept += 1
            result = _PendingRun(f"pending-{os.getpid()}-{self.runs_kept}")
            kwargs = {**kwargs, PLACEHOLDER: result.info.run_id}
        self.pending.append((name, args, kwargs))
        self._save()
        return result

    def _save(self) -> None:
        self.backlog_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.backlog_path.with_suffix(".tmp")
        temporary.write_bytes(pickle.dumps(self.pending))
        os.replace(temporary, self.backlog_path)

    def flush(self) -> bool:
        """Write the backlog in order; True once it is empty (the server answered)."""
        self.last_try = time.time()
        try:
            replay(self.client, self.pending, self.ids)
        except Exception as error:
            if not server_away(error):
                raise
            self._save()
            return False
        self.backlog_path.unlink(missing_ok=True)
        if self.away:
            self.outages[-1].ended = time.time()
        return True


PLACEHOLDER = "_placeholder_run_id"


def _named(value, ids: dict[str, str]):
    """`value` with each placeholder run id replaced by the real one (in tuples, lists, dicts)."""
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, dict):
        return {key: _named(item, ids) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_named(item, ids) for item in value)
    return value


def replay(client, pending: list, ids: dict[str, str]) -> None:
    """Make the calls of `pending` in order, each removed once made (a failure leaves it
    and the rest); a run created here has its placeholder mapped to its id in `ids`."""
    while pending:
        name, args, kwargs = pending[0]
        kwargs = dict(kwargs)
        placeholder = kwargs.pop(PLACEHOLDER, None)
        result = getattr(client, name)(*_named(args, ids), **_named(kwargs, ids))
        if placeholder is not None:
            ids[placeholder] = result.info.run_id
        pending.pop(0)


def replay_backlog(client, backlog_path: Path) -> int:
    """Write a backlog an earlier driver left (`sweep resume`, the server answering);
    the number of writes made."""
    if not backlog_path.is_file():
        return 0
    pending = pickle.loads(backlog_path.read_bytes())
    count = len(pending)
    replay(client, pending, {})
    backlog_path.unlink()
    return count
