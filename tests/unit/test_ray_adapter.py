"""The parts of sweeper/cluster/ray_adapter.py that can be checked without a Ray cluster:
what the trial's TorchTrainer is, Ray's ID generator in forks, Tune's trial numbers, the
labelled worker group, and MLflow's name checks. tests/integration/test_ray_adapter.py
checks the rest against a real cluster, the stop logic of a trial's TorchTrainer among it."""

import os
import subprocess
import sys

import pytest

from sweeper.cluster import ray_adapter


def test_the_trainer_is_a_torch_trainer_and_pickles_by_reference():
    import pickle

    from ray.train.torch import TorchTrainer

    assert issubclass(ray_adapter.StoppableTorchTrainer, TorchTrainer)
    assert pickle.loads(pickle.dumps(ray_adapter.StoppableTorchTrainer)) is ray_adapter.StoppableTorchTrainer


def test_importing_the_adapter_loads_neither_ray_nor_torch():
    code = "import sys, sweeper.cluster.ray_adapter; print(sorted({'ray', 'torch', 'mlflow'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "[]"


def test_forks_draw_their_own_ray_ids_after_classes_are_defined_under_the_guard():
    """What the warm server relies on: classes defined while the guard is entered leave
    Ray's generator unseeded, so each fork seeds its own; a draw before forking seeds it,
    and forks then repeat each other's IDs (the probe must notice)."""
    code = """
import ray
from sweeper.cluster import ray_adapter
with ray_adapter.actor_class_ids_from_urandom():
    @ray.remote
    class A:
        pass
print(ray_adapter.ids_differ_in_forks())
from ray._raylet import JobID, PlacementGroupID
PlacementGroupID.of(JobID.from_int(1))
print(ray_adapter.ids_differ_in_forks())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.split() == ["True", "False"]


@pytest.mark.parametrize("name", ["", " ", "a/b", "a:b", "../x"])
def test_mlflow_refuses_bad_model_names(name):
    assert ray_adapter.model_name_problem(name)


@pytest.mark.parametrize("alias", ["latest", "v3", "a/b"])
def test_mlflow_refuses_reserved_and_bad_aliases(alias):
    assert ray_adapter.alias_problem(alias)


def test_good_names_pass():
    assert ray_adapter.model_name_problem("qa-lora") is None
    assert ray_adapter.alias_problem("champion") is None


def test_the_address_file_is_where_ray_start_records_its_head(tmp_path, monkeypatch):
    """`--address auto` probes the head named in this file; Ray keeps it in its temp folder
    (RAY_TMPDIR moves that folder), under the name `ray start` writes."""
    from sweeper.cluster.ray_adapter import ray_address_file

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert ray_address_file() == tmp_path / "ray" / "ray_current_cluster"


def _trials_of(generator, tmp_path) -> list:
    from ray.tune.experiment import Experiment

    def trainable(config):
        pass

    generator.add_configurations([Experiment("numbered", trainable, num_samples=3, storage_path=str(tmp_path))])
    trials = []
    while (trial := generator.next_trial()) is not None:
        trials.append(trial)
    return trials


@pytest.mark.parametrize("searched", [True, False])
def test_tune_trial_number_counts_the_trials_from_1_with_and_without_a_searcher(searched, tmp_path):
    """Tune's own generators: its search generator (a searched sweep) and its basic
    variant generator (nothing searched) number their experiment tags differently."""
    from ray.tune.search import BasicVariantGenerator, SearchGenerator, Searcher

    class OneConfig(Searcher):
        def suggest(self, trial_id):
            return {"training.learning_rate": 3e-4}

        def on_trial_complete(self, trial_id, result=None, error=False):
            pass

    generator = SearchGenerator(OneConfig()) if searched else BasicVariantGenerator()
    assert [ray_adapter.tune_trial_number(t) for t in _trials_of(generator, tmp_path)] == [1, 2, 3]


def test_a_labelled_worker_group_creates_train_workers_whose_repr_is_the_label():
    from ray.train.v2._internal.execution.worker_group import WorkerGroup
    from ray.train.v2._internal.execution.worker_group.worker import RayTrainWorker

    group = ray_adapter.worker_group_with_repr("sweep-demo-trial-4")
    assert issubclass(group, WorkerGroup) and issubclass(group._worker_cls, RayTrainWorker)
    assert group._worker_cls.__name__ == "RayTrainWorker"  # the dashboard's Class column
    assert repr(group._worker_cls()) == "sweep-demo-trial-4"


def test_a_run_whose_workers_never_started_is_told_apart_from_other_failures():
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError
    from ray.train.v2.api.exceptions import ControllerError

    timed_out = ControllerError(WorkerGroupStartupTimeoutError(num_workers=2))
    assert ray_adapter.workers_never_started(timed_out)
    try:  # as the trial sees it: raised from fit with the controller's error as its cause
        raise RuntimeError("Training failed") from timed_out
    except RuntimeError as error:
        assert ray_adapter.workers_never_started(error)
    assert not ray_adapter.workers_never_started(ControllerError(ValueError("bad config")))
    assert not ray_adapter.workers_never_started(ValueError("loss is nan"))


def test_an_ended_trials_running_averages_are_forgotten_and_its_figures_kept(tmp_path):
    """Tune keeps deques of recent values per reported number (what forget_running_averages
    drops); the figures derived from them stay, and the trial's checkpoint JSON shrinks."""
    from ray.tune.search import BasicVariantGenerator

    trial = _trials_of(BasicVariantGenerator(), tmp_path)[0]
    for step in (1, 2, 3):
        trial.update_last_result({"eval_loss": 1.0 / step, "train_loss": 2.0 / step, "training_iteration": step})
    assert len(trial.run_metadata.metric_n_steps["eval_loss"]["10"]) == 3
    figures = {metric: dict(values) for metric, values in trial.metric_analysis.items()}
    checkpointed = trial.get_json_state()[1]

    ray_adapter.forget_running_averages(trial)

    assert trial.run_metadata.metric_n_steps == {}
    assert trial.metric_analysis == figures and figures["eval_loss"]["last-5-avg"] == pytest.approx(11 / 18)
    assert len(trial.get_json_state()[1]) < len(checkpointed)


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
