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
from sweeper.run.ray_part import REPORT_GAP_SECONDS, REPORTS, RunTimes
from tests.unit.test_forecast import CPU_BOX, quickstart_like

CALIBRATED = TrialTiming(0.1, 0.5, 1.0 + RAY_TRIAL_START_SECONDS, "calibrated")
PLAN = make_plan(quickstart_like(), CPU_BOX)  # 2 trials at once


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def trial_events(trial_id: str, at: float, start: float, report: float) -> list[tuple[float, str, str]]:
    """One empty trial as the driver sees it: started at `at`, its first report `start` +
    `report` later, the next ones REPORT_GAP_SECONDS + `report` apart, its end 0.1 s after the last."""
    events, now = [(at, "start", trial_id)], at + start + report
    for index in range(REPORTS):
        now += (REPORT_GAP_SECONDS + report) if index else 0.0
        events.append((now, "result", trial_id))
    return [*events, (now + 0.1, "complete", trial_id)]


def replay(times: RunTimes, clock: Clock, *trials: list) -> None:
    """The trials' events in the order of their times, as Tune calls the callback."""
    for at, kind, trial_id in sorted(event for trial in trials for event in trial):
        clock.now = at
        trial = SimpleNamespace(trial_id=trial_id)
        if kind == "start":
            times.on_trial_start(0, [], trial)
        elif kind == "result":
            times.on_trial_result(0, [], trial, {})
        else:
            times.on_trial_complete(0, [], trial)


def test_the_empty_trials_give_rays_part_of_a_start_a_report_and_the_cold_start():
    clock = Clock()
    times = RunTimes(concurrent_trials=2, clock=clock)
    # The first wave starts cold (3 s), the later ones in its actors (2 s, one 3.5 s: a
    # median moves not for one slow start); a report's way is 0.1 s.
    first = trial_events("a", 0.0, 3.0, 0.1)
    second_at = first[-1][0] + 0.5
    second = trial_events("c", second_at, 2.0, 0.1)
    third_at = second[-1][0] + 0.5
    replay(
        times, clock, first, trial_events("b", 0.0, 3.0, 0.1),
        second, trial_events("d", second_at, 3.5, 0.1),
        trial_events("e", third_at, 2.0, 0.1), trial_events("f", third_at, 2.0, 0.1),
    )
    part = times.ray_part(seconds=9.0)
    assert part.start_seconds == pytest.approx(2.0)
    assert part.cold_start_seconds == pytest.approx(1.0)
    assert part.report_seconds == pytest.approx(0.1)
    assert (part.trials, part.seconds) == (6, 9.0)


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
    part = RayPart(start_seconds=1.9, report_seconds=0.2, cold_start_seconds=2.5, trials=4, seconds=8.0)
    timing = part.applied(CALIBRATED)
    assert timing.setup_seconds == pytest.approx(1.0 + 1.9)  # the loop's own setup, then Ray's as measured
    assert timing.eval_seconds == pytest.approx(0.5 + 0.2)
    assert timing.cold_start_seconds == 2.5
    # A stop and a turnaround keep their constants (they hold what the slot arithmetic misses).
    assert (timing.stop_seconds, timing.turnaround_seconds) == (CALIBRATED.stop_seconds, CALIBRATED.turnaround_seconds)
    assert timing.step_seconds == CALIBRATED.step_seconds
    # A slower Ray than the constants' makes a dearer forecast.
    assert forecast_sweep(PLAN, timing).expected.usd > forecast_sweep(PLAN, CALIBRATED).expected.usd


def calibrating_to(monkeypatch, timing: TrialTiming) -> None:
    from sweeper.plan import calibrate

    calibration = calibrate.Calibration(timing, timing, 1.0, copies=2, per_copy=[(timing, timing)] * 2)
    monkeypatch.setattr(calibrate, "calibrate", lambda *args, **kwargs: calibration)


def test_sweep_start_measures_rays_part_only_where_no_sweep_of_the_shape_has_ended(tmp_path, monkeypatch):
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path))
    calibrating_to(monkeypatch, CALIBRATED)
    part = RayPart(1.9, 0.2, 2.5, 4, 8.0)
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
        "Ray's part of a trial start (1.9 s), the first wave's cold start (2.5 s) and a report's way to the driver "
        "(200 ms), with 4 empty trials on the cluster in 8.0 s; modelled (no sweep of this shape has ended on this "
        "machine yet): a trial's stop (0.3 s), a slot's turnaround (0.5 s)"
    ) in line, line

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
