"""The driver's side of "a sweep never hangs" without a cluster: the worker start bound
and the stall watchdog's timing and output. tests/integration/test_never_hang.py checks them on a real cluster."""

from types import SimpleNamespace

import pytest

from sweeper.cluster._placement import resources_text
from sweeper.run import _watchdog as watchdog
from sweeper.run._trial import WORKER_START_FLOOR_S, worker_start_timeout


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
