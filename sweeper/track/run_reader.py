"""Reading runs from the MLflow store: runs found by their tags, with their tags, params
and latest metrics, and metric histories. What `SweepStore` needs, in two
implementations with one interface:

- `ClientRunReader`: MLflow's public client (any store: SQLite, a server, ...).
- `SqliteRunReader`: the same answers read straight from a local SQLite store's tables
  (MLflow's database schema, not a public API: this module is the one place that knows
  it). Importing MLflow and building its SQLAlchemy store takes about 2 s on a 2-core
  machine, ten times the queries themselves; `sweep list` and `sweep status` answer in
  a fraction of that without them. `reader_for` falls back to the client when the file
  does not hold the tables this reader knows, and `tests/unit/test_run_reader.py` checks
  that both readers give the same answers on a store MLflow wrote.

Runs come back as MLflow's `Run` (client) or `RunView` (SQLite): both have
`info.run_id`, `info.run_name`, `info.experiment_id`, `info.status`, `info.start_time`,
`info.end_time`, `info.artifact_uri` and `data.tags`, `data.params`, `data.metrics`.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ClientRunReader", "SqliteRunReader", "NoStoreYet", "RunView", "reader_for"]

PAGE = 1000  # MLflow's largest search page
CHUNK = 500  # run ids per SQL IN (...) list, well below SQLite's variable limit


@dataclass(frozen=True)
class RunInfoView:
    run_id: str
    run_name: str | None
    experiment_id: str
    status: str
    start_time: int | None
    end_time: int | None
    artifact_uri: str | None


@dataclass(frozen=True)
class RunDataView:
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunView:
    """A run as `SqliteRunReader` returns it (the fields of MLflow's `Run` we read)."""

    info: RunInfoView
    data: RunDataView


@dataclass(frozen=True)
class MetricPoint:
    step: int
    value: float
    timestamp: int


class ClientRunReader:
    """Runs through MLflow's public `MlflowClient`."""

    def __init__(self, client):
        self.client = client

    def find_runs(self, tags: dict[str, str], experiment_ids: list[str] | None = None, newest_first: bool = False) -> list:
        """Active runs (of active experiments) whose tags hold every `tags` item."""
        if experiment_ids is None:
            experiment_ids = [e.experiment_id for e in self.client.search_experiments()]
        if not experiment_ids:
            return []
        query = " and ".join(f"tags.`{key}` = '{value}'" for key, value in tags.items())
        order_by = ["attributes.start_time DESC"] if newest_first else None
        runs, token = [], None
        while True:
            page = self.client.search_runs(
                experiment_ids, filter_string=query, order_by=order_by, max_results=PAGE, page_token=token
            )
            runs += page
            token = page.token
            if not token:
                return runs

    def metric_histories(self, run_ids: list[str], key: str) -> dict[str, list]:
        """Every logged value of metric `key` per run (points with step, value, timestamp)."""
        return {run_id: self.client.get_metric_history(run_id, key) for run_id in run_ids}


class NoStoreYet:
    """A local SQLite store whose file does not exist: no runs. A read never creates the
    store (MLflow's client would, schema and all, wherever `sweep list` was typed)."""

    def find_runs(self, tags: dict[str, str], experiment_ids: list[str] | None = None, newest_first: bool = False) -> list:
        return []

    def metric_histories(self, run_ids: list[str], key: str) -> dict[str, list]:
        return {}


class SqliteRunReader:
    """The same queries as `ClientRunReader`, read from a local SQLite store's tables
    (opened read-only)."""

    TABLES = {
        "runs": {"run_uuid", "name", "status", "start_time", "end_time", "lifecycle_stage", "artifact_uri",
                 "experiment_id"},
        "experiments": {"experiment_id", "lifecycle_stage"},
        "tags": {"key", "value", "run_uuid"},
        "params": {"key", "value", "run_uuid"},
        "latest_metrics": {"key", "value", "is_nan", "run_uuid"},
        "metrics": {"key", "value", "timestamp", "step", "is_nan", "run_uuid"},
    }

    def __init__(self, path: Path):
        self.path = path
        self.db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)

    def knows_schema(self) -> bool:
        """True if the file holds every table and column this reader queries."""
        try:
            for table, columns in self.TABLES.items():
                found = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
                if not columns <= found:
                    return False
        except sqlite3.Error:
            return False
        return True

    def find_runs(self, tags: dict[str, str], experiment_ids: list[str] | None = None, newest_first: bool = False) -> list[RunView]:
        sql = (
            "SELECT r.run_uuid, r.name, r.experiment_id, r.status, r.start_time, r.end_time, r.artifact_uri "
            "FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id "
            "WHERE r.lifecycle_stage = 'active' AND e.lifecycle_stage = 'active'"
        )
        args: list = []
        for key, value in tags.items():
            sql += " AND EXISTS (SELECT 1 FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = ? AND t.value = ?)"
            args += [key, value]
        if experiment_ids is not None:
            sql += f" AND r.experiment_id IN ({', '.join('?' * len(experiment_ids))})"
            args += [int(e) for e in experiment_ids]
        sql += " ORDER BY r.start_time DESC, r.run_uuid" if newest_first else ""
        rows = self.db.execute(sql, args).fetchall()
        ids = [row[0] for row in rows]
        tags_by = self._key_values("tags", ids)
        params_by = self._key_values("params", ids)
        metrics_by = self._latest_metrics(ids)
        return [
            RunView(
                RunInfoView(run_id, name, str(experiment), status, start, end, artifact_uri),
                RunDataView(tags_by.get(run_id, {}), params_by.get(run_id, {}), metrics_by.get(run_id, {})),
            )
            for run_id, name, experiment, status, start, end, artifact_uri in rows
        ]

    def metric_histories(self, run_ids: list[str], key: str) -> dict[str, list[MetricPoint]]:
        histories: dict[str, list[MetricPoint]] = {run_id: [] for run_id in run_ids}
        for chunk in _chunks(run_ids):
            rows = self.db.execute(
                f"SELECT run_uuid, step, value, timestamp, is_nan FROM metrics WHERE key = ? "
                f"AND run_uuid IN ({', '.join('?' * len(chunk))}) ORDER BY run_uuid, timestamp, step, value",
                [key, *chunk],
            )
            for run_id, step, value, timestamp, is_nan in rows:
                histories[run_id].append(MetricPoint(step, math.nan if is_nan else value, timestamp))
        return histories

    def _key_values(self, table: str, run_ids: list[str]) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for chunk in _chunks(run_ids):
            rows = self.db.execute(
                f"SELECT run_uuid, key, value FROM {table} WHERE run_uuid IN ({', '.join('?' * len(chunk))})", chunk
            )
            for run_id, key, value in rows:
                found.setdefault(run_id, {})[key] = value
        return found

    def _latest_metrics(self, run_ids: list[str]) -> dict[str, dict[str, float]]:
        found: dict[str, dict[str, float]] = {}
        for chunk in _chunks(run_ids):
            rows = self.db.execute(
                f"SELECT run_uuid, key, value, is_nan FROM latest_metrics WHERE run_uuid IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            for run_id, key, value, is_nan in rows:
                found.setdefault(run_id, {})[key] = math.nan if is_nan else value
        return found


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[start : start + CHUNK] for start in range(0, len(items), CHUNK)]


def reader_for(uri: str, client_factory) -> ClientRunReader | SqliteRunReader | NoStoreYet:
    """The SQLite reader for a local SQLite store whose tables it knows, no runs for one
    whose file does not exist; else the client's (`client_factory()` makes the MlflowClient)."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if not path.exists():
            return NoStoreYet()
        if path.is_file():
            try:
                reader = SqliteRunReader(path)
            except sqlite3.Error:
                reader = None
            if reader is not None and reader.knows_schema():
                return reader
    return ClientRunReader(client_factory())
