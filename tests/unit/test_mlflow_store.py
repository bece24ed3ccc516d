"""The SQLite store MLflow creates for `client_for`, and the one it opens as it is."""

def test_a_new_sqlite_store_is_created_by_mlflow_and_an_existing_one_opened_as_it_is(tmp_path):
    from sweeper.track import _mlflow_store as mlflow_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow_store.client_for(uri)
    assert [e.name for e in client.search_experiments()] == ["Default"]
    run = client.create_run(client.create_experiment("e"))
    client.log_metric(run.info.run_id, "eval_loss", 1.5)
    client.create_registered_model("m")
    again = mlflow_store.client_for(uri)
    assert again.get_metric_history(run.info.run_id, "eval_loss")[0].value == 1.5
    assert [model.name for model in again.search_registered_models()] == ["m"]


def test_an_in_memory_store_leaves_no_file_behind(tmp_path, monkeypatch):
    from sweeper.track import _mlflow_store as mlflow_store

    monkeypatch.chdir(tmp_path)
    mlflow_store.client_for("sqlite:///:memory:")
    assert list(tmp_path.iterdir()) == []
