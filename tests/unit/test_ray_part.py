"""Ray's part of a trial measured on the cluster before the sweep (sweeper/run/ray_part.py):
the figures from the driver's times of the empty trials, and the forecast that uses them
where this machine has no sweep of the shape to learn from."""

from types import SimpleNamespace

import pytest

from sweeper.cost.throughput import RAY_TRIAL_START_SECONDS, RayPart, TrialTiming
from sweeper.plan.command import sweep_forecast
from sweeper.plan.forecast import forecast_sweep
from sweeper.plan.forecast_lines import forecast_lines
from sweeper.plan.machine_profile import PROFILES_ENV, MachineProfile, SweepMeasure, machine_key, sweep_shape
from sweeper.plan.sweep_plan import make_plan
from sweeper.run.ray_part import (
    BUSY_SECONDS, BUSY_SECONDS_METRIC, BUSY_STEP_SECONDS_METRIC, REPORT_GAP_SECONDS, AloneLast, RunTimes, busy_steps,
)
from trainables.metrics import TRAIN_CPU_SHARE
from tests.unit.test_forecast import CPU_BOX, quickstart_like

CALIBRATED = TrialTiming(0.1, 0.5, 1.0 + RAY_TRIAL_START_SECONDS, "calibrated", cpu_share=0.99)
PLAN = make_plan(quickstart_like(), CPU_BOX)  # 2 trials at once


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def trial_events(
    trial_id: str, at: float, start: float, report: float, share: float = 0.8, step: float = 0.001
) -> list[tuple]:
    """One empty trial as the driver sees it: started at `at`, its first report `start` +
    `report` later, the second BUSY_SECONDS later (carrying the loop's busy seconds, its
    thread's `share` of a core and its seconds per busy `step`; the driver's own work delayed
    the first, so no report's way shows here), the third REPORT_GAP_SECONDS + `report` after
    that, its end 0.1 s later."""
    first = at + start + report
    second = first + BUSY_SECONDS
    third = second + REPORT_GAP_SECONDS + report
    busy = {BUSY_SECONDS_METRIC: BUSY_SECONDS, TRAIN_CPU_SHARE: share, BUSY_STEP_SECONDS_METRIC: step}
    return [
        (at, "start", trial_id, {}),
        (first, "result", trial_id, {}),
        (second, "result", trial_id, busy),
        (third, "result", trial_id, {BUSY_SECONDS_METRIC: REPORT_GAP_SECONDS}),
        (third + 0.1, "complete", trial_id, {}),
    ]


def replay(times: RunTimes, clock: Clock, *trials: list) -> None:
    """The trials' events in the order of their times, as Tune calls the callback."""
    for at, kind, trial_id, result in sorted((event for trial in trials for event in trial), key=lambda e: e[:3]):
        clock.now = at
        trial = SimpleNamespace(trial_id=trial_id)
        if kind == "start":
            times.on_trial_start(0, [], trial)
        elif kind == "result":
            times.on_trial_result(0, [], trial, result)
        else:
            times.on_trial_complete(0, [], trial)


def test_the_empty_trials_give_rays_part_of_a_start_a_report_and_the_cold_start():
    clock = Clock()
    times = RunTimes(concurrent_trials=2, clock=clock)
    # The first wave starts cold (3 s), the later ones in its actors (2 s, one 3.5 s: a
    # median moves not for one slow start); a report's way is 0.1 s.
    # Each wave starts 0.3 s after the last one ended; the busy threads got 0.7-0.9 of a core.
    first = trial_events("a", 0.0, 3.0, 0.1, share=0.7)
    second_at = first[-1][0] + 0.3
    second = trial_events("c", second_at, 2.0, 0.1, share=0.9)
    third_at = trial_events("d", second_at, 3.5, 0.1)[-1][0] + 0.3
    replay(
        times, clock, first, trial_events("b", 0.0, 3.0, 0.1, share=0.75),
        second, trial_events("d", second_at, 3.5, 0.1, share=0.85),
        trial_events("e", third_at, 2.0, 0.1, share=0.8), trial_events("f", third_at, 2.0, 0.1, share=0.8),
    )
    part = times.ray_part(seconds=9.0)
    assert part.start_seconds == pytest.approx(2.0)
    assert part.cold_start_seconds == pytest.approx(1.0)
    assert part.report_seconds == pytest.approx(0.1)  # the interval less the loop's busy seconds
    assert part.stop_seconds == pytest.approx(0.1)
    # "c" and "d" take the slots "a" and "b" freed 0.3 s before; "e" and "f" start 0.3 s after
    # "d" ended and 1.8 s after "c" did, paired with the slot freed first: 0.3, 0.3, 1.8, 0.3.
    assert part.turnaround_seconds == pytest.approx(0.3)
    assert part.cpu_share == pytest.approx(0.8)  # the median of the six
    assert part.alone_ratio is None  # no trial ran alone
    assert (part.trials, part.seconds) == (6, 9.0)


def test_a_trial_alone_after_the_waves_gives_the_alone_ratio_and_nothing_else():
    clock = Clock()
    times = RunTimes(concurrent_trials=2, alone_last=True, clock=clock)
    # Two waves whose busy steps took 1.0-1.2 ms beside each other, then one trial alone,
    # started cold in a new actor (4 s) once both had ended, its busy steps 0.88 ms with
    # its thread's whole core.
    first = [trial_events(t, 0.0, 3.0, 0.1, share=0.8, step=0.0011) for t in "ab"]
    second_at = first[0][-1][0] + 0.3
    second = [trial_events(t, second_at, 2.0, 0.1, share=0.8, step=s) for t, s in (("c", 0.0010), ("d", 0.0012))]
    alone_at = second[0][-1][0] + 1.0
    replay(times, clock, *first, *second, trial_events("e", alone_at, 4.0, 0.1, share=1.0, step=0.00088))
    assert times.alone() == {"e"}
    part = times.ray_part(seconds=9.0)
    assert part.alone_ratio == pytest.approx(0.00088 / 0.0011)  # over the waves' median
    # The alone trial's cold start, its wait for the waves and its whole core leave the
    # waves' figures as they were.
    assert (part.start_seconds, part.cold_start_seconds) == (pytest.approx(2.0), pytest.approx(1.0))
    assert part.turnaround_seconds == pytest.approx(0.3)
    assert part.cpu_share == pytest.approx(0.8)
    assert part.trials == 5


def test_alone_is_never_slower_than_beside_others_and_without_an_alone_trial_there_is_no_ratio():
    def waves_then(alone_step: float | None) -> RunTimes:
        clock = Clock()
        times = RunTimes(concurrent_trials=2, alone_last=alone_step is not None, clock=clock)
        waves = [trial_events(t, at, 2.0, 0.1, step=0.001) for t, at in (("a", 0.0), ("b", 0.0), ("c", 10.0), ("d", 10.0))]
        alone = [trial_events("e", 20.0, 2.0, 0.1, share=1.0, step=alone_step)] if alone_step is not None else []
        replay(times, clock, *waves, *alone)
        return times

    assert waves_then(0.0011).ray_part(seconds=1.0).alone_ratio == 1.0  # a noisy 1.1 reads as "as fast"
    # "c" and "d" started once "a" and "b" had ended, but ran together: no trial ran alone.
    times = waves_then(None)
    assert times.alone() == set() and times.ray_part(seconds=1.0).alone_ratio is None


def test_the_alone_trial_counts_its_steps_at_a_whole_core():
    # Alone, its busy steps took 0.95 ms, but its thread had 0.8 of a core (something else
    # ran on the cores): at a whole core, as a sweep's trial alone has, they take 0.76 ms.
    clock = Clock()
    times = RunTimes(concurrent_trials=2, alone_last=True, clock=clock)
    waves = [trial_events(t, at, 2.0, 0.1, step=0.001) for t, at in (("a", 0.0), ("b", 0.0), ("c", 10.0), ("d", 10.0))]
    replay(times, clock, *waves, trial_events("e", 20.0, 2.0, 0.1, share=0.8, step=0.00095))
    assert times.ray_part(seconds=1.0).alone_ratio == pytest.approx(0.8 * 0.00095 / 0.001)


def test_the_last_empty_trial_is_suggested_only_once_the_waves_have_ended():
    order = AloneLast(in_waves=2, alone=True)
    assert [order.suggest("a"), order.suggest("b")] == [{}, {}]
    assert order.suggest("c") is None  # both running
    order.on_trial_complete("a")
    assert order.suggest("c") is None  # one still running
    order.on_trial_complete("b")
    assert order.suggest("c") == {}
    assert order.suggest("d") == AloneLast.FINISHED
    waves_only = AloneLast(in_waves=1, alone=False)
    assert waves_only.suggest("a") == {} and waves_only.suggest("b") == AloneLast.FINISHED


def test_nothing_is_measured_unless_every_trial_reported_and_ended_and_one_started_warm():
    clock = Clock()
    times = RunTimes(concurrent_trials=2, clock=clock)
    replay(times, clock, trial_events("a", 0.0, 3.0, 0.1), trial_events("b", 0.0, 3.0, 0.1))
    assert times.ray_part(seconds=1.0) is None  # only the cold wave
    late = trial_events("c", 10.0, 2.0, 0.1)
    replay(times, clock, late[:1], trial_events("d", 10.0, 2.0, 0.1))  # "c" started, never reported
    assert times.ray_part(seconds=1.0) is None
    replay(times, clock, late[1:])
    assert times.ray_part(seconds=1.0).trials == 4


def test_the_measured_part_replaces_rays_constants_in_a_calibrated_timing():
    part = RayPart(
        start_seconds=1.9, report_seconds=0.2, cold_start_seconds=2.5, trials=4, seconds=8.0,
        stop_seconds=0.1, turnaround_seconds=0.15, cpu_share=0.8, alone_ratio=0.8,
    )
    timing = part.applied(CALIBRATED)
    assert timing.alone_ratio == 0.8 and RayPart(1.9, 0.2, 2.5, 4, 8.0).applied(CALIBRATED).alone_ratio == 1.0
    assert timing.setup_seconds == pytest.approx(1.0 + 1.9)  # the loop's own setup, then Ray's as measured
    assert (timing.cold_start_seconds, timing.stop_seconds, timing.turnaround_seconds) == (2.5, 0.1, 0.15)
    # The calibration's thread had 0.99 of a core, the sweep's busy threads 0.8: steps and
    # evaluations take 0.99 / 0.8 as long there; each evaluation's report is added.
    assert timing.step_seconds == pytest.approx(0.1 * 0.99 / 0.8)
    assert timing.eval_seconds == pytest.approx(0.5 * 0.99 / 0.8 + 0.2)
    assert "x1.24 (a training thread's share of a core there)" in timing.source
    # A slower Ray than the constants' makes a dearer forecast.
    assert forecast_sweep(PLAN, timing).expected.usd > forecast_sweep(PLAN, CALIBRATED).expected.usd


def test_steps_keep_the_calibrated_time_where_either_share_is_unknown():
    # GPU trials (no busy thread measured) or a calibration that reported no share.
    on_gpu = RayPart(1.9, 0.2, 2.5, 4, 8.0, cpu_share=None)
    assert on_gpu.applied(CALIBRATED).step_seconds == CALIBRATED.step_seconds
    measured = RayPart(1.9, 0.2, 2.5, 4, 8.0, cpu_share=0.8)
    unknown = TrialTiming(0.1, 0.5, 2.0, "modelled")
    assert measured.applied(unknown).step_seconds == unknown.step_seconds


def test_the_busy_steps_keep_the_thread_busy_for_the_time_asked_and_measure_its_share():
    seconds, share, steps = busy_steps(0.2, threads=1)
    assert seconds >= 0.2 and steps >= 1
    assert 0.0 < share <= 1.05  # CPU time over wall time (thread_time's tick can round up a little)


def calibrating_to(monkeypatch, timing: TrialTiming) -> None:
    from sweeper.plan import calibrate

    calibration = calibrate.Calibration(timing, timing, 1.0, copies=2, per_copy=[(timing, timing)] * 2)
    monkeypatch.setattr(calibrate, "calibrate", lambda *args, **kwargs: calibration)


def test_sweep_start_measures_rays_part_only_where_no_sweep_of_the_shape_has_ended(tmp_path, monkeypatch):
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path))
    calibrating_to(monkeypatch, CALIBRATED)
    part = RayPart(1.9, 0.2, 2.5, 4, 8.0, stop_seconds=0.1, turnaround_seconds=0.2, cpu_share=0.8, alone_ratio=0.8)
    asked = []

    def measure() -> RayPart:
        asked.append(1)
        return part

    inputs = SimpleNamespace(data={}, model_source="")
    forecast = sweep_forecast(PLAN, CPU_BOX, inputs, on_cluster=False, measure_ray_part=measure)
    assert asked == [1] and forecast.ray_part == part
    assert forecast.timing.setup_seconds == pytest.approx(2.9)
    assert forecast.calibrated.setup_seconds == CALIBRATED.setup_seconds  # what a profile is measured against
    assert forecast.as_params()["forecast_ray_part"].startswith("Ray's part of a trial start (1.9 s)")
    (line,) = [line for line in forecast_lines(forecast, "CPU core-hours") if line.startswith("Measured")]
    assert (
        "Ray's part of a trial start (1.9 s), the first wave's cold start (2.5 s), a report's way to the driver "
        "(200 ms), a trial's stop (0.1 s), a slot's turnaround (0.2 s), a training thread's share of a core (0.80), "
        "a trial alone in x0.80 of its time beside others, with 4 empty trials on the cluster in 8.0 s; modelled "
        "(no sweep of this shape has ended on this machine yet): what the driver's logging and the neighbours' "
        "starts and evaluations take of the cores, which trials"
    ) in line, line
    assert forecast.timing.step_seconds == pytest.approx(0.1 * 0.99 / 0.8)
    assert forecast.timing.alone_ratio == 0.8

    # Once a sweep of the shape has ended here, its figures apply and nothing is measured.
    measure_kept = SweepMeasure("earlier", 0.0, 1.0, 1.0, 1.5, 0.4, 0.9, 1.0, sweep_shape(PLAN), 1.0, 1.0)
    MachineProfile.add(machine_key(CPU_BOX, on_cluster=False), measure_kept)
    forecast = sweep_forecast(PLAN, CPU_BOX, inputs, on_cluster=False, measure_ray_part=measure)
    assert asked == [1] and forecast.ray_part is None
    assert forecast.timing.setup_seconds == pytest.approx(1.0 + 1.5)


def test_a_failed_measure_keeps_the_constants_and_says_they_are_modelled(tmp_path, monkeypatch):
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path))
    calibrating_to(monkeypatch, CALIBRATED)
    inputs = SimpleNamespace(data={}, model_source="")
    forecast = sweep_forecast(PLAN, CPU_BOX, inputs, on_cluster=False, measure_ray_part=lambda: None)
    assert forecast.timing.setup_seconds == CALIBRATED.setup_seconds
    (line,) = [line for line in forecast_lines(forecast, "CPU core-hours") if line.startswith("Measured")]
    assert f"Ray's part of a trial start ({RAY_TRIAL_START_SECONDS:.1f} s)" in line
    assert forecast.ray_part is None and "forecast_ray_part" not in forecast.as_params()


def test_a_plan_whose_local_cluster_will_not_start_keeps_the_constants_and_leaves_nothing_running(monkeypatch):
    from sweeper.cluster import connect
    from sweeper.run import ray_part

    ended = []

    def refuse(*args, **kwargs):
        raise RuntimeError("the dashboard's port is taken")

    monkeypatch.setattr(connect, "start_ray", refuse)
    monkeypatch.setattr(connect, "stop_local_cluster", lambda: ended.append("ray"))
    assert ray_part.measure_ray_part_for_plan(PLAN, address=None) is None
    assert ended == ["ray"]
