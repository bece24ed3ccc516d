"""Both shapes of trial (sweeper/run/_trial.py) and what sweeper/cluster/ray_adapter.py
relies on, against a real local Ray cluster. A one-worker trial trains in Tune's trial
process, which Tune reuses for the next trial: stopped trials give their CPUs to the next
at once, with no Train actor or placement group of their own, and what one trial changed
in the process the next does not see. A several-worker trial is Train's own run, whose
reports reach Tune and whose CPUs come back when Tune stops it."""

import time

import pytest

pytestmark = pytest.mark.integration


def endless_loop(config):
    """Reports forever through the trial's session (a one-worker trial's TrialStorage), or
    through Ray Train in a Train worker."""
    import ray.train

    session = config.get("session")
    step = 0
    while True:
        step += 1
        if session is not None:
            session.report({"step": step}, None)
        else:
            ray.train.report({"step": step})
        time.sleep(0.05)


def leftovers_loop(config):
    """Reports what an earlier trial in this process left behind, then leaves some itself:
    an environment variable, torch's thread count, and the state of Python's random."""
    import os
    import random

    import torch

    config["session"].report({
        "step": 1,
        "pid": os.getpid(),
        "left_variable": os.environ.get("SWEEPER_LEFT_BY_A_TRIAL", ""),
        "threads": torch.get_num_threads(),
        "random": random.random(),
    }, None)
    os.environ["SWEEPER_LEFT_BY_A_TRIAL"] = config["trial"].training.learning_rate.__repr__()
    torch.set_num_threads(7)
    random.seed(config["trial"].training.seed + 1)


def memory_loop(config):
    """What a trial does to its process's memory, at the quickstart's shape: the built-in
    model loaded, LoRA added, a few optimizer steps; then the process's resident memory."""
    import os

    import psutil
    import torch

    from trainables.models import add_lora, load_base_model, resolve_model_source

    trial = config["trial"]
    model = add_lora(load_base_model(resolve_model_source(trial.model.name_or_path)), trial.lora)  # the shared cache
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    tokens = torch.randint(0, model.config.vocab_size, (4, 64))
    for _ in range(3):
        model(input_ids=tokens, labels=tokens).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    config["session"].report({"step": 1, "pid": os.getpid(), "rss": psutil.Process().memory_info().rss}, None)


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    yield ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False)
    ray.shutdown()


def trainable(tmp_path, loop, **resources):
    """sweeper's own trial function, as a sweep makes it, training `loop`."""
    from ray import tune

    from sweeper.run._trial import run_trial, trial_resources
    from sweeper.spec._load import validate_spec
    from tests.conftest import small_sweep

    spec = validate_spec(small_sweep("adapter", output_dir=str(tmp_path / "sweeps"), resources=resources), tmp_path)
    function = tune.with_parameters(
        run_trial, trial_config=spec.trial_config(), data={}, cache_root=str(tmp_path),
        trials_dir=str(tmp_path / "trials"), worker_start_timeout_s=60.0, train_loop=loop,
    )
    return tune.with_resources(function, trial_resources(spec.resources)), spec


def cpu_groups_left() -> list:
    """Placement groups not yet removed that hold CPUs (trials' and Train runs')."""
    import ray

    return [pg for pg in ray.util.placement_group_table().values()
            if pg["state"] != "REMOVED" and any(bundle.get("CPU") for bundle in pg["bundles"].values())]


def wait_for_groups_removed(timeout_s: float = 30) -> list:
    """The placement groups still left after `timeout_s` (none, normally)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and cpu_groups_left():
        time.sleep(0.1)
    return cpu_groups_left()


def test_stopped_one_worker_trials_hand_their_process_and_cpus_to_the_next(ray_cluster, tmp_path):
    from ray import tune
    from ray.util.state import list_actors

    earlier_actors = {a.actor_id for a in list_actors(limit=1000)}
    function, spec = trainable(tmp_path, endless_loop)
    assert spec.resources.in_trial_process
    tuner = tune.Tuner(
        function,
        param_space={"training.seed": tune.grid_search([0, 1, 2])},
        # Three endless trials of one CPU each on two CPUs: the third starts only once a
        # stopped one has given its CPU back.
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), stop={"training_iteration": 3}, verbose=0),
    )
    results = tuner.fit()
    assert [r.metrics["step"] for r in results] == [3, 3, 3]
    assert wait_for_groups_removed() == []
    actors = [a for a in list_actors(limit=1000) if a.actor_id not in earlier_actors]
    trial_processes = [a for a in actors if a.class_name == "ImplicitFunc"]
    assert len(trial_processes) < 3, trial_processes  # a process was reused
    assert not {"TrainController", "RayTrainWorker", "PlacementGroupCleaner"} & {a.class_name for a in actors}


def test_a_trial_in_a_reused_process_finds_nothing_the_trial_before_it_left(ray_cluster, tmp_path):
    from ray import tune

    function, _ = trainable(tmp_path, leftovers_loop)
    tuner = tune.Tuner(
        function,
        param_space={"training.learning_rate": tune.grid_search([1e-4, 3e-3])},
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), verbose=0),
    )
    first, second = (result.metrics for result in tuner.fit())
    assert first["pid"] == second["pid"]  # one process, two trials
    assert second["left_variable"] == "" and second["threads"] == first["threads"] != 7
    assert second["random"] == first["random"]


def test_forty_trials_in_one_reused_process_leave_its_memory_flat(ray_cluster, tmp_path):
    """Nothing of a finished trial stays in the process: its resident memory after the
    last of 40 trials is within 10% of where it stood once the first trials had warmed it."""
    import statistics

    from ray import tune

    function, _ = trainable(tmp_path, memory_loop)
    tuner = tune.Tuner(
        function,
        param_space={"training.seed": tune.grid_search(list(range(40)))},
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), verbose=0),
    )
    reports = [r.metrics for r in sorted(tuner.fit(), key=lambda r: r.config["training.seed"])]
    assert len({m["pid"] for m in reports}) == 1  # one process ran all 40
    warm = statistics.median(m["rss"] for m in reports[5:10])
    last = statistics.median(m["rss"] for m in reports[-5:])
    assert last <= 1.10 * warm, f"RSS {warm / 2**20:.0f} MiB after trials 6-10, {last / 2**20:.0f} MiB after 36-40"


def test_a_several_worker_trial_is_trains_own_run_and_gives_its_cpus_back_when_stopped(ray_cluster, tmp_path):
    """Tune ends a stopped several-worker trial's process, and with it the Train controller
    and workers it owns; three endless one-CPU runs on two CPUs all reach their stop."""
    from ray import tune

    function, spec = trainable(tmp_path, endless_loop, workers_per_trial=2, cpus_per_worker=0.5)
    assert not spec.resources.in_trial_process
    tuner = tune.Tuner(
        function,
        param_space={"training.seed": tune.grid_search([0, 1, 2])},
        tune_config=tune.TuneConfig(reuse_actors=False, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), stop={"training_iteration": 3}, verbose=0),
    )
    results = tuner.fit()
    assert [r.metrics["training_iteration"] for r in results] == [3, 3, 3]
    assert all(r.metrics["step"] >= 3 for r in results)  # the Train workers' own reports
    assert wait_for_groups_removed() == []


def test_the_head_node_resource_places_an_actor_on_the_head(ray_cluster):
    """Several-worker trials' processes ask for ON_THE_HEAD_NODE: Ray must still give its
    head that resource."""
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
