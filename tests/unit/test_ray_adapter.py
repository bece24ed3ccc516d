"""The parts of sweeper/cluster/ray_adapter.py that can be checked without a Ray cluster:
what the trial's TorchTrainer is, Tune's trial numbers, and the
labelled worker group. tests/integration/test_ray_adapter.py checks the rest against a real
cluster, the stop logic of a trial's TorchTrainer among it."""

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


def test_the_version_guard_takes_the_private_paths_only_on_the_tested_ray(monkeypatch):
    import importlib.metadata

    major, minor = (int(part) for part in importlib.metadata.version("ray").split(".")[:2])
    assert ray_adapter.uses_private_ray() == ((major, minor) == ray_adapter.TESTED_RAY)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.61.0")
    assert not ray_adapter.uses_private_ray()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.60.3")
    assert ray_adapter.uses_private_ray()
    monkeypatch.setenv(ray_adapter.PUBLIC_ONLY_ENV, "1")
    assert not ray_adapter.uses_private_ray()


@pytest.fixture
def public_only(monkeypatch):
    monkeypatch.setenv(ray_adapter.PUBLIC_ONLY_ENV, "1")


def test_the_public_fallback_trainer_is_trains_own_and_trials_are_not_reused(public_only):
    import pickle

    from ray.train.torch import TorchTrainer

    trainer = ray_adapter.TrialTrainer
    assert trainer is ray_adapter.PublicTorchTrainer and issubclass(trainer, TorchTrainer)
    assert "fit_until" in vars(trainer) and pickle.loads(pickle.dumps(trainer)) is trainer
    assert not ray_adapter.reuse_trial_actors() and not ray_adapter.reports_in_trial_thread()


def test_the_public_fallbacks_answer_without_rays_internals(public_only, tmp_path, monkeypatch):
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError
    from ray.train.v2.api.exceptions import ControllerError

    from sweeper.errors import UserError

    # The trial then fails with Train's own message instead of ours naming the resources.
    assert not ray_adapter.workers_never_started(ControllerError(WorkerGroupStartupTimeoutError(num_workers=2)))
    stop = ray_adapter.tune_stop_event()  # no Tune session here: none needed
    assert not stop.is_set()
    ray_adapter.save_tune_state(object())  # nothing to call on: Tune saves on its own period
    with pytest.raises(UserError, match=r"^NAME: sweep resume restores Tune's state through Ray 2\.60 internals"):
        ray_adapter.restore_tuner(str(tmp_path), lambda config: None, [])
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    fallback = ray_adapter.ray_address_file()
    monkeypatch.delenv(ray_adapter.PUBLIC_ONLY_ENV)
    assert fallback == ray_adapter.ray_address_file() == tmp_path / "ray" / "ray_current_cluster"

