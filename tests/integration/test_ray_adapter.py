"""What sweeper/cluster/ray_adapter.py relies on, against a real local Ray cluster: a trial's
StoppableTorchTrainer runs Train's controller inside the trial's own actor (no controller
actor, one placement-group cleaner per trial actor), and when Tune
stops the trial its run is aborted: its placement group is removed and its CPUs go to
the next trial, also when Tune kills the trial's actor at the end. Run in an actor of
their own, `fit_until` returns once its `stop` is set, after Train's controller has run
its abort hooks and recorded the run as aborted, and raises a run's failure as it is. The
adapter's public fallback (PublicTorchTrainer, no actor reuse) stops and releases too.""" 

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
    from sweeper.run._trial import ReportToTune

    trainer = StoppableTorchTrainer(
        train_loop_per_worker=endless_loop,
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=tune.get_context().get_trial_id(), storage_path=config["storage"], callbacks=[ReportToTune()]),
    )
    trainer.fit_until(tune_stop_event())


def public_trial(config):
    """The trial on ray_adapter's public fallback: Train's own fit(), its controller an
    actor of its own, reports through Ray's TuneReportCallback."""
    from ray import tune
    from ray.train import RunConfig, ScalingConfig

    from sweeper.cluster.ray_adapter import PublicTorchTrainer, tune_stop_event
    from sweeper.run._trial import ReportToTuneThroughQueue

    trainer = PublicTorchTrainer(
        train_loop_per_worker=endless_loop,
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(
            name=tune.get_context().get_trial_id(), storage_path=config["storage"], callbacks=[ReportToTuneThroughQueue()]
        ),
    )
    trainer.fit_until(tune_stop_event())


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    yield ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False)
    ray.shutdown()


def train_groups_left() -> list:
    """Placement groups of Train runs not yet removed: Train's runs reserve CPUs, Tune's
    trial actors only a token of memory."""
    import ray

    return [pg for pg in ray.util.placement_group_table().values()
            if pg["state"] != "REMOVED" and any("CPU" in bundle for bundle in pg["bundles"].values())]


def wait_for_train_groups_removed(timeout_s: float = 30) -> list:
    """The Train runs' placement groups still left after `timeout_s` (none, normally)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and train_groups_left():
        time.sleep(0.1)
    return train_groups_left()


def test_stopped_runs_release_their_workers_at_once_and_start_no_extra_actors(ray_cluster, tmp_path):
    from ray import tune
    from ray.util.state import list_actors

    # Actors of the other tests in this module are not this sweep's.
    earlier_actors = {a.actor_id for a in list_actors(limit=1000)}

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
    groups_left = wait_for_train_groups_removed()
    actors = [a for a in list_actors(limit=1000) if a.actor_id not in earlier_actors]
    assert groups_left == [], [(a.class_name, a.state) for a in actors]
    trial_actors = [a for a in actors if a.class_name == "ImplicitFunc"]
    cleaners = [a for a in actors if a.class_name == "PlacementGroupCleaner"]
    assert 1 <= len(cleaners) <= len(trial_actors) < 3, (cleaners, trial_actors)  # actors were reused
    assert "TrainController" not in {a.class_name for a in actors}


def test_on_the_public_fallback_stopped_runs_give_their_cpus_back_and_report_to_tune(ray_cluster, tmp_path):
    """Off the tested Ray (ray_adapter.uses_private_ray() False) trials are not reused:
    Tune ends a stopped trial's actor, and with it the Train controller and workers it
    owns; three endless one-CPU runs on two CPUs all reach their stop."""
    from ray import tune

    tuner = tune.Tuner(
        tune.with_resources(public_trial, {"cpu": 0, "memory": 1024**2}),
        param_space={"storage": str(tmp_path / "trials"), "index": tune.grid_search([0, 1, 2])},
        tune_config=tune.TuneConfig(reuse_actors=False, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), stop={"training_iteration": 3}, verbose=0),
    )
    started = time.time()
    results = tuner.fit()
    assert [r.metrics["training_iteration"] for r in results] == [3, 3, 3]
    assert all(r.metrics["step"] >= 3 for r in results)  # the Train workers' own reports
    assert time.time() - started < 300
    assert wait_for_train_groups_removed() == []


class TrialActor:
    """Runs StoppableTorchTrainers one after another in its own process, as a Tune trial's
    actor does (Tune reuses it for the next trial)."""

    def fit_until(self, train_loop, storage: str, stop_once_running: bool) -> dict:
        """`train_loop` on one worker, through `StoppableTorchTrainer.fit_until(stop)`. If
        `stop_once_running`, another thread sets `stop` once the run is RUNNING (its worker
        started), as Tune does from the actor's main thread. Returns how fit_until ended
        ("returned": its value, or "raised": the error's type and text), and "events": what
        Train's controller told its callbacks through Ray Train's callback interface, its
        abort hook (`before_controller_abort`) and each state it entered."""
        import threading

        from ray.train import RunConfig, ScalingConfig
        from ray.train.v2._internal.execution.callback import ControllerCallback

        from sweeper.cluster.ray_adapter import StoppableTorchTrainer

        class ControllerEvents(ControllerCallback):
            def __init__(self):
                self.events = []

            def before_controller_abort(self):
                self.events.append("before_controller_abort")

            def after_controller_state_update(self, previous_state, current_state):
                self.events.append(type(current_state).__name__)

        stop, recorder = threading.Event(), ControllerEvents()

        def set_stop_once_running():
            while not stop.is_set():
                if "RunningState" in recorder.events:
                    stop.set()
                time.sleep(0.01)

        trainer = StoppableTorchTrainer(
            train_loop_per_worker=train_loop,
            scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=storage, callbacks=[recorder]),
        )
        if stop_once_running:
            threading.Thread(target=set_stop_once_running, daemon=True).start()
        try:
            ended = {"returned": trainer.fit_until(stop)}
        except Exception as exc:
            ended = {"raised": f"{type(exc).__name__}: {exc}"}
        finally:
            stop.set()  # ends the thread should the run end before it was RUNNING
        return {**ended, "events": recorder.events}


@pytest.fixture(scope="module")
def trial_actor(ray_cluster):
    import ray

    actor = ray.remote(num_cpus=0)(TrialActor).remote()
    yield actor
    ray.kill(actor)


def test_a_stopped_run_is_aborted_and_fit_until_returns(trial_actor, tmp_path):
    """Once `stop` is set, Train's controller runs its abort hooks, its workers are killed
    and their placement group removed, the run is recorded ABORTED, and fit_until
    returns (the run's Result, with no error) instead of raising or waiting for an end
    the loop never reaches."""
    import ray
    from ray.util.state import list_actors

    run = ray.get(trial_actor.fit_until.remote(endless_loop, str(tmp_path), stop_once_running=True), timeout=180)
    assert "raised" not in run and run["returned"].error is None, run
    assert "RunningState" in run["events"]
    assert run["events"][-2:] == ["before_controller_abort", "AbortedState"], run["events"]
    assert wait_for_train_groups_removed() == []
    workers = list_actors(filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")], limit=1000)
    assert workers == []


def failing_loop(config):
    raise ValueError("bad config")


def test_a_run_that_fails_raises_its_error_and_is_not_aborted(trial_actor, tmp_path):
    """A failure that is not a stop comes out of fit_until (Tune then fails the trial, and
    the driver reads the loop's own error from it); the run ends ERRORED, not aborted."""
    import ray

    run = ray.get(trial_actor.fit_until.remote(failing_loop, str(tmp_path), stop_once_running=False), timeout=180)
    assert "returned" not in run, run
    assert "ValueError: bad config" in run["raised"], run["raised"]
    assert run["events"][-1] == "ErroredState" and "before_controller_abort" not in run["events"], run["events"]
    assert wait_for_train_groups_removed() == []


def test_the_head_node_resource_places_an_actor_on_the_head(ray_cluster):
    """Trial actors ask for ON_THE_HEAD_NODE: Ray must still give its head that resource."""
    import ray

    from sweeper.cluster.ray_adapter import ON_THE_HEAD_NODE

    @ray.remote(num_cpus=0, resources=ON_THE_HEAD_NODE)
    def where() -> str:
        return ray.get_runtime_context().get_node_id()

    head = next(node["NodeID"] for node in ray.nodes() if set(ON_THE_HEAD_NODE) <= set(node["Resources"]))
    assert ray.get(where.remote(), timeout=60) == head


def test_the_sweeps_workers_open_no_event_files_and_the_others_still_do(ray_cluster):
    """NO_WORKER_EVENT_FILES in a runtime env: a worker process started with it opens no
    event file in the session's logs/events; one started without it still does (the
    setting is Ray's, read from each process's environment)."""
    import os
    from pathlib import Path

    import ray

    from sweeper.cluster.ray_adapter import NO_WORKER_EVENT_FILES

    @ray.remote(num_cpus=0)
    class Process:
        def pid(self) -> int:
            return os.getpid()

    ours = Process.options(runtime_env={"env_vars": NO_WORKER_EVENT_FILES}).remote()
    other = Process.remote()
    our_pid, other_pid = ray.get([ours.pid.remote(), other.pid.remote()], timeout=60)
    events = Path(ray_cluster.address_info["session_dir"]) / "logs" / "events"
    assert (events / f"event_CORE_WORKER_{other_pid}.log").exists(), sorted(p.name for p in events.iterdir())
    assert not (events / f"event_CORE_WORKER_{our_pid}.log").exists()
    ray.kill(ours)
    ray.kill(other)


def in_saved_state(config):
    """Reports whether Tune's newest saved experiment state, as on storage, holds this trial."""
    from pathlib import Path

    from ray import tune

    states = sorted(Path(config["experiment"]).glob("experiment_state-*.json"))
    saved = bool(states) and tune.get_context().get_trial_id() in states[-1].read_text()
    tune.report({"saved": float(saved)})


@pytest.mark.parametrize("saved_first", [True, False])
def test_a_trial_is_in_tunes_saved_state_when_it_starts(saved_first, ray_cluster, tmp_path, monkeypatch):
    """What sweeper/search/_tune_state.py relies on (save_tune_state): a scheduler handed
    Tune's controller saves the state with the trials just added, before they start. With
    Tune's own period alone (one hour here, 10 s or more by default) the trials started
    after its first save are not in it."""
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler

    from sweeper.search._tune_state import SavedFIFOScheduler

    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "3600")
    tuner = tune.Tuner(
        in_saved_state,
        param_space={"experiment": str(tmp_path / "saved")},
        tune_config=tune.TuneConfig(
            num_samples=3, max_concurrent_trials=1, scheduler=SavedFIFOScheduler() if saved_first else FIFOScheduler()
        ),
        run_config=tune.RunConfig(name="saved", storage_path=str(tmp_path)),
    )
    saved = [result.metrics["saved"] for result in tuner.fit()]
    assert saved == [1.0] * 3 if saved_first else 0.0 in saved, saved
