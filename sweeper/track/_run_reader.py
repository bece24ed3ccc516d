"""Reading runs from the MLflow store through MLflow's public `MlflowClient`: runs found
by their tags, with their tags, params and latest metrics, and metric histories. What
`SweepStore` needs, for any store (SQLite, a database, a server).

Runs come back as MLflow's `Run`: `info.run_id`, `info.run_name`, `info.experiment_id`,
`info.status`, `info.start_time`, `info.end_time`, `info.artifact_uri` and `data.tags`,
`data.params`, `data.metrics`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ClientRunReader", "NoStoreYet", "reader_for"]

PAGE = 1000  # MLflow's largest search page


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


def reader_for(uri: str, client_factory) -> ClientRunReader | NoStoreYet:
    """No runs for a local SQLite store whose file does not exist; else the client's
    (`client_factory()` makes the MlflowClient)."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return NoStoreYet()
    return ClientRunReader(client_factory())
