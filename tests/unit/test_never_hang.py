"""The driver's side of "a sweep never hangs" without a cluster: the worker start bound,
which trials' placement groups are released and when, and the stall watchdog's timing
and output. tests/integration/test_never_hang.py checks them on a real cluster."""

from types import SimpleNamespace

import pytest

from sweeper.cluster._placement import resources_text
from sweeper.run import _release as release, _watchdog as watchdog
from sweeper.run._trial import WORKER_START_FLOOR_S, worker_start_timeout
from trainables.metrics import PLACEMENT_GROUP


def test_the_worker_start_bound_is_stated_or_ten_measured_starts_with_a_floor():
    assert worker_start_timeout(15.0, 30.0) == 15.0  # resources.worker_start_timeout_s wins
    assert worker_start_timeout(None, 12.0) == 120.0
    assert worker_start_timeout(None, 2.0) == WORKER_START_FLOOR_S
    assert worker_start_timeout(None, None) == WORKER_START_FLOOR_S


def test_resources_are_told_without_rays_internal_entries():
    free = {"CPU": 2.0, "memory": 1e9, "node:127.0.0.1": 1.0, "CPU_group_0_ab12": 1.0, "trainer": 1.0, "GPU": 0.0}
    assert resources_text(free) == "2 CPU, 1 trainer"
    assert resources_text({}) == "nothing"


def trial(trial_id: str, status: str):
    return SimpleNamespace(trial_id=trial_id, status=status)


def test_a_trial_tune_is_done_with_has_its_group_released_before_the_next_step_starts_trials(monkeypatch):
    released = []
    monkeypatch.setattr(release, "release_placement_group", lambda group: released.append(group) or True)
    callback = release.ReleaseFinishedRuns()
    paused, pruned, running = trial("a", "RUNNING"), trial("b", "RUNNING"), trial("c", "RUNNING")
    for t, group in ((paused, "pg-a"), (pruned, "pg-b"), (running, "pg-c")):
        callback.on_trial_result(0, [], t, {"step": 10, PLACEMENT_GROUP: group})
    callback.on_trial_result(0, [], running, {"step": 20})  # later reports carry no group: still held
    paused.status, pruned.status = "PAUSED", "TERMINATED"
    callback.on_step_begin(1, [paused, pruned, running])
    assert released == ["pg-a", "pg-b"] and callback.released == 2
    callback.on_step_begin(2, [paused, pruned, running])  # each group once
    assert released == ["pg-a", "pg-b"]
    # A paused trial continued runs anew, with a group of its own, released in turn.
    paused.status = "RUNNING"
    callback.on_trial_result(3, [], paused, {"step": 20, PLACEMENT_GROUP: "pg-a2"})
    callback.on_experiment_end([paused, pruned, running])
    assert sorted(released[2:]) == ["pg-a2", "pg-c"]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Table:
    def __init__(self):
        self.shown = "never called"

    def waiting(self, lines):
        self.shown = lines


def test_the_watchdog_says_what_the_cluster_waits_on_once_per_stall_and_clears_on_a_report(tmp_path, monkeypatch):
    monkeypatch.setattr(watchdog, "waiting_lines", lambda: ["placement group 1234abcd waits for 1 x (1 CPU)"])
    clock, table, log = Clock(), Table(), tmp_path / "driver.log"
    dog = watchdog.StallWatchdog(table, log, floor_s=60, clock=clock)
    running = [trial("a", "RUNNING")]
    dog.on_trial_start(0, running, running[0])
    clock.now += 20
    dog.on_trial_result(0, running, running[0], {})
    clock.now += 30  # a report 30 s later: the longest gap so far, 3 x 30 s = 90 s is the stall
    dog.on_trial_result(0, running, running[0], {})
    assert dog.stall_seconds == 90
    clock.now += 89
    dog.on_step_end(1, running)
    assert not log.exists() and table.shown == "never called"
    clock.now += 2
    dog.on_step_end(2, running)
    assert table.shown[0] == "no trial has reported for 91 s while 1 run; the cluster:"
    assert "placement group 1234abcd waits for 1 x (1 CPU)" in log.read_text()
    clock.now += 30
    dog.on_step_end(3, running)  # not again until another stall's time has passed
    assert log.read_text().count("no trial has reported") == 1
    clock.now += 61
    dog.on_step_end(4, running)
    assert log.read_text().count("no trial has reported") == 2
    dog.on_trial_result(5, running, running[0], {})
    assert table.shown is None


def test_the_watchdog_is_quiet_while_nothing_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(watchdog, "waiting_lines", pytest.fail)
    clock = Clock()
    dog = watchdog.StallWatchdog(Table(), tmp_path / "driver.log", clock=clock)
    clock.now += 3600
    dog.on_step_end(1, [trial("a", "PAUSED"), trial("b", "TERMINATED")])


def test_a_trial_that_ends_has_its_group_released_at_once(monkeypatch):
    released = []
    monkeypatch.setattr(release, "release_placement_group", lambda group: released.append(group) or True)
    callback = release.ReleaseFinishedRuns()
    pruned, failed = trial("a", "RUNNING"), trial("b", "RUNNING")
    callback.on_trial_result(0, [], pruned, {PLACEMENT_GROUP: "pg-a"})
    callback.on_trial_result(0, [], failed, {PLACEMENT_GROUP: "pg-b"})
    callback.on_trial_complete(1, [], pruned)
    callback.on_trial_error(1, [], failed)
    pruned.status, failed.status = "TERMINATED", "ERROR"
    callback.on_step_begin(2, [pruned, failed])
    assert released == ["pg-a", "pg-b"]


def test_groups_are_released_from_the_driver_only_where_tune_reuses_trial_actors(monkeypatch):
    from sweeper.cluster import ray_adapter

    # On the tested Ray: a reused actor's run waits in its last report, so the driver releases it.
    monkeypatch.setattr(ray_adapter, "uses_private_ray", lambda: True)
    assert [type(c) for c in release.release_callbacks()] == [release.ReleaseFinishedRuns]
    # On the public fallback Tune ends the actor and Train's cleaner removes the group; a
    # removal from the driver while the controller still lives would make Train retry the run.
    monkeypatch.setattr(ray_adapter, "uses_private_ray", lambda: False)
    assert release.release_callbacks() == []
