"""What sweeper/track/mlflow_adapter.py relies on in MLflow: its checks of registered-model
names and aliases, and a new SQLite store built from the empty one that is the store MLflow
builds itself."""

import pytest

from sweeper.track import mlflow_adapter


@pytest.mark.parametrize("name", ["", " ", "a/b", "a:b", "../x"])
def test_mlflow_refuses_bad_model_names(name):
    assert mlflow_adapter.model_name_problem(name)


@pytest.mark.parametrize("alias", ["latest", "v3", "a/b"])
def test_mlflow_refuses_reserved_and_bad_aliases(alias):
    assert mlflow_adapter.alias_problem(alias)


def test_good_names_pass():
    assert mlflow_adapter.model_name_problem("qa-lora") is None
    assert mlflow_adapter.alias_problem("champion") is None


def test_a_new_sqlite_store_from_the_empty_one_is_the_store_mlflow_builds(tmp_path, monkeypatch):
    """The copy (sweeper/track/mlflow_store.py) against a store MLflow builds itself: the
    same tables at the same schema revision, and the Default experiment MLflow adds on
    opening either, where a store of its own would have it."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    from sweeper.track import mlflow_store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mlflow_store, "CACHE_ROOT", tmp_path / "cache")
    theirs, ours = tmp_path / "theirs.db", tmp_path / "ours.db"
    MlflowClient(tracking_uri=f"sqlite:///{theirs}").search_experiments()
    client = mlflow_store.client_for(f"sqlite:///{ours}")
    assert [e.artifact_location for e in client.search_experiments()] == [
        e.artifact_location for e in MlflowClient(tracking_uri=f"sqlite:///{theirs}").search_experiments()
    ]

    def schema(database):
        """Each table's definition as a set of lines: two builds by MLflow itself may list
        a table's CHECK constraints in either order."""
        with sqlite3.connect(database) as db:
            tables = db.execute("select name, sql from sqlite_master where type = 'table'").fetchall()
            revision = db.execute("select version_num from alembic_version").fetchall()
        return {name: set(sql.replace(",", "").split("\n")) for name, sql in tables}, revision

    assert schema(ours) == schema(theirs)
    run = client.create_run(client.create_experiment("e"))
    client.log_metric(run.info.run_id, "eval_loss", 1.5)
    client.create_registered_model("m")
    # An existing store is opened as it is, never replaced by the empty one.
    again = mlflow_store.client_for(f"sqlite:///{ours}")
    assert again.get_metric_history(run.info.run_id, "eval_loss")[0].value == 1.5
    assert [model.name for model in again.search_registered_models()] == ["m"]


def test_without_a_cache_to_keep_the_empty_store_in_mlflow_builds_the_store_itself(tmp_path, monkeypatch):
    from sweeper.track import mlflow_store

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache would be")
    monkeypatch.setattr(mlflow_store, "CACHE_ROOT", blocked)
    client = mlflow_store.client_for(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [e.name for e in client.search_experiments()] == ["Default"]


def test_an_in_memory_store_leaves_no_file_behind(tmp_path, monkeypatch):
    from sweeper.track import mlflow_store

    monkeypatch.chdir(tmp_path)
    mlflow_store.client_for("sqlite:///:memory:")
    assert list(tmp_path.iterdir()) == []
