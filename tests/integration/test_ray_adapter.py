"""What sweeper/cluster/ray_adapter.py relies on, against a real local Ray cluster: a trial's
StoppableTorchTrainer runs Train's controller inside the trial's own actor (no controller
actor, one placement-group cleaner per trial actor), and when Tune
stops the trial its run is aborted: its placement group is removed and its CPUs go to
the next trial, also when Tune kills the trial's actor at the end."""

import time

import pytest

pytestmark = pytest.mark.integration


def endless_loop(config):
    import ray.train

    step = 0
    while True:
        step += 1
        ray.train.report({"step": step})
        time.sleep(0.05)


def stoppable_trial(config):
    from ray import tune
    from ray.train import RunConfig, ScalingConfig

    from sweeper.cluster.ray_adapter import StoppableTorchTrainer, tune_stop_event
    from sweeper.run.trial import ReportToTune

    trainer = StoppableTorchTrainer(
        train_loop_per_worker=endless_loop,
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=tune.get_context().get_trial_id(), storage_path=config["storage"], callbacks=[ReportToTune()]),
    )
    trainer.fit_until(tune_stop_event())


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False)
    yield
    ray.shutdown()


def test_stopped_runs_release_their_workers_at_once_and_start_no_extra_actors(ray_cluster, tmp_path):
    import ray
    from ray import tune
    from ray.util.state import list_actors

    class StopTimes(tune.Callback):
        def __init__(self):
            self.stopped_at = {}

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.stopped_at[trial.trial_id] = time.time()

    stop_times = StopTimes()
    tuner = tune.Tuner(
        tune.with_resources(stoppable_trial, {"cpu": 0, "memory": 1024**2}),
        param_space={"storage": str(tmp_path / "trials"), "index": tune.grid_search([0, 1, 2])},
        # Three endless runs of one CPU each on two CPUs: the third starts only once a
        # stopped one has given its CPU back.
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=2),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path / "tune"), stop={"training_iteration": 3}, callbacks=[stop_times], verbose=0
        ),
    )
    started = time.time()
    results = tuner.fit()
    assert [r.metrics["training_iteration"] for r in results] == [3, 3, 3]
    assert time.time() - started < 300
    # Train's runs reserve CPUs; Tune's trial actors only a token of memory.
    def train_groups_left():
        return [pg for pg in ray.util.placement_group_table().values()
                if pg["state"] != "REMOVED" and any("CPU" in bundle for bundle in pg["bundles"].values())]

    deadline = time.time() + 30
    while time.time() < deadline and train_groups_left():
        time.sleep(0.1)
    actors = list_actors(limit=1000)
    assert train_groups_left() == [], [(a.class_name, a.state) for a in actors]
    trial_actors = [a for a in actors if a.class_name == "ImplicitFunc"]
    cleaners = [a for a in actors if a.class_name == "PlacementGroupCleaner"]
    assert 1 <= len(cleaners) <= len(trial_actors) < 3, (cleaners, trial_actors)  # actors were reused
    assert "TrainController" not in {a.class_name for a in actors}


def test_the_head_node_resource_places_an_actor_on_the_head(ray_cluster):
    """Trial actors ask for ON_THE_HEAD_NODE: Ray must still give its head that resource."""
    import ray

    from sweeper.cluster.ray_adapter import ON_THE_HEAD_NODE

    @ray.remote(num_cpus=0, resources=ON_THE_HEAD_NODE)
    def where() -> str:
        return ray.get_runtime_context().get_node_id()

    head = next(node["NodeID"] for node in ray.nodes() if set(ON_THE_HEAD_NODE) <= set(node["Resources"]))
    assert ray.get(where.remote(), timeout=60) == head
