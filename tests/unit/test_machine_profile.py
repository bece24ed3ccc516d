"""What a calibration cannot see, kept per machine from the sweeps that ran there
(sweeper/plan/machine_profile.py), and the next forecast that applies it."""

import json
from dataclasses import replace

import pytest

from sweeper.cost.throughput import RAY_TRIAL_START_SECONDS, TrialTiming
from sweeper.plan.forecast import forecast_lines, forecast_sweep, with_spread
from sweeper.plan.live import Measured
from sweeper.plan.machine_profile import KEPT, PROFILES_ENV, MachineProfile, SweepMeasure, machine_key, sweep_shape
from sweeper.plan.sweep_plan import make_plan
from tests.unit.test_forecast import CPU_BOX, quickstart_like

# As calibrated: 0.1 s per step, 0.5 s per evaluation, a start of 2 s (1 s the loop's own
# setup, 1 s Ray's part as modelled).
CALIBRATED = TrialTiming(0.1, 0.5, 1.0 + RAY_TRIAL_START_SECONDS, "calibrated", 0.3, 0.5, 1.2)
SHAPE = sweep_shape(make_plan(quickstart_like(), CPU_BOX))


@pytest.fixture(autouse=True)
def profiles(tmp_path, monkeypatch):
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path))
    return tmp_path


def measured_sweep(step: float = 0.12, evaluation: float = 0.8, start: float = 2.5) -> Measured:
    """A sweep's sums: 100 steps at `step` s, 10 evaluations at `evaluation` s, 4 later
    starts at `start` s and 2 cold ones 1 s longer, 3 stops of 0.4 s, 3 turnarounds of 0.9 s."""
    measured = Measured()
    for _ in range(10):
        measured.add_interval(10, 10 * step, evaluation)
    for cold in (True, True, False, False, False, False):
        measured.add_start(0, 0.0, start + (1.0 if cold else 0.0), cold=cold)
    for _ in range(3):
        measured.add_stop(0.4)
        measured.add_turnaround(0.9)
    return measured


def test_a_sweep_keeps_what_it_measured_against_its_calibration():
    measure = SweepMeasure.of("quickstart", SHAPE, CALIBRATED, measured_sweep())
    assert measure.step_ratio == pytest.approx(1.2) and measure.eval_ratio == pytest.approx(1.6)
    # A later run's start, 2.5 s, less the loop's own calibrated setup (1 s).
    assert measure.ray_start_seconds == pytest.approx(1.5)
    assert measure.cold_start_seconds == pytest.approx(1.0)
    assert (measure.stop_seconds, measure.turnaround_seconds) == (pytest.approx(0.4), pytest.approx(0.9))
    assert SweepMeasure.of("nothing", SHAPE, CALIBRATED, Measured()) is None


def test_the_next_forecast_applies_the_median_of_the_last_sweeps():
    key = machine_key(CPU_BOX, on_cluster=False)
    assert MachineProfile.load(key) is None
    # One sweep under a passing load (steps at 3x) among ordinary ones moves no figure.
    for step in (0.12, 0.3, 0.12):
        MachineProfile.add(key, SweepMeasure.of("s", SHAPE, CALIBRATED, measured_sweep(step=step)))
    profile = MachineProfile.load(key)
    here = profile.applied(CALIBRATED, SHAPE)
    assert here.step_seconds == pytest.approx(0.12) and here.eval_seconds == pytest.approx(0.8)
    assert here.setup_seconds == pytest.approx(1.0 + 1.5)  # the loop's setup, then Ray's part as measured
    assert (here.stop_seconds, here.turnaround_seconds, here.cold_start_seconds) == (
        pytest.approx(0.4), pytest.approx(0.9), pytest.approx(1.0)
    )
    assert "as this machine's last 3 sweep(s) ran it" in here.source
    for _ in range(KEPT):
        MachineProfile.add(key, SweepMeasure.of("s", SHAPE, CALIBRATED, measured_sweep(step=0.2)))
    assert len(MachineProfile.load(key).sweeps) == KEPT
    assert MachineProfile.load(key).applied(CALIBRATED, SHAPE).step_seconds == pytest.approx(0.2)


def test_a_profile_is_per_machine_and_an_unreadable_one_is_none(profiles):
    local = machine_key(CPU_BOX, on_cluster=False)
    cluster = machine_key(CPU_BOX, on_cluster=True)
    assert local != cluster
    MachineProfile.add(local, SweepMeasure.of("s", SHAPE, CALIBRATED, measured_sweep()))
    assert MachineProfile.load(cluster) is None
    (path,) = profiles.glob("*.json")
    assert json.loads(path.read_text())["machine"] == local
    path.write_text("{not json")
    assert MachineProfile.load(local) is None


def test_sweep_plan_says_which_figures_this_machine_measured():
    plan = make_plan(quickstart_like(), CPU_BOX)
    key = machine_key(CPU_BOX, on_cluster=False)
    profile = MachineProfile.add(key, SweepMeasure.of("s", SHAPE, CALIBRATED, measured_sweep(), wall_ratio=1.25))
    timing = profile.applied(CALIBRATED, SHAPE)
    forecast = with_spread(forecast_sweep(plan, timing), plan, [(timing, timing)] * 2)
    forecast = replace(forecast, machine_note=profile.line(SHAPE))
    (line,) = [line for line in forecast_lines(forecast, "CPU core-hours") if line.startswith("Measured")]
    assert line.startswith(
        "Measured: step time, evaluation time, the training loop's setup (calibration); what a sweep adds, on this "
        "machine's last 1 sweep (median): Ray's part of a trial start (1.5 s), a trial's stop (0.4 s), a slot's "
        "turnaround (0.9 s), the first wave's cold start (1.0 s), steps in a sweep x1.20, evaluations in a sweep x1.60, "
        "the wall time x1.25 of the slot arithmetic's; modelled: which trials early stopping stops"
    ), line
    # The forecast grows with what the sweeps measured: slower steps and evaluations, dearer starts.
    assert forecast.expected.usd > forecast_sweep(plan, CALIBRATED).expected.usd


def test_steps_and_evaluations_follow_sweeps_of_the_same_shape_and_overheads_any_sweep():
    """On the 2-core machine evaluations ran at 1.3-1.6x the calibration's with one worker
    per trial and at 0.7-0.8x with two: a sweep of another shape moves neither ratio."""
    key = machine_key(CPU_BOX, on_cluster=False)
    assert SHAPE == "sft, 1 worker(s) per trial, 2 at once"
    two_workers = sweep_shape(make_plan(quickstart_like(resources={"workers_per_trial": 2}), CPU_BOX))
    assert two_workers != SHAPE
    MachineProfile.add(key, SweepMeasure.of("two", two_workers, CALIBRATED, measured_sweep(step=0.3, evaluation=0.35)))
    profile = MachineProfile.load(key)
    here = profile.applied(CALIBRATED, SHAPE)
    assert (here.step_seconds, here.eval_seconds) == (CALIBRATED.step_seconds, CALIBRATED.eval_seconds)
    assert here.turnaround_seconds == pytest.approx(0.9)  # the machine's, whatever the shape
    assert profile.line(SHAPE).endswith(f"steps and evaluations as calibrated (no sweep of {SHAPE} yet)")
    assert profile.applied(CALIBRATED, two_workers).eval_seconds == pytest.approx(0.35)
    MachineProfile.add(key, SweepMeasure.of("one", SHAPE, CALIBRATED, measured_sweep(step=0.12)))
    assert MachineProfile.load(key).applied(CALIBRATED, SHAPE).step_seconds == pytest.approx(0.12)


def test_the_wall_time_the_slot_arithmetic_misses_scales_the_next_forecasts_wall():
    from sweeper.plan.forecast import ladder_as_run

    plan = make_plan(quickstart_like(), CPU_BOX)  # 10 to step 10, 3 to 30, 1 to 90
    # Trials that ended at these steps trained into each segment as the expected ladder says.
    assert ladder_as_run(plan, [10] * 7 + [30] * 2 + [90]) == [(10, 10), (30, 3), (90, 1)]
    # A sweep cut by a cap: fewer trials, one stopped inside the last segment.
    assert ladder_as_run(plan, [10] * 4 + [30, 50]) == [(10, 6), (30, 2), (90, 1)]
    key = machine_key(CPU_BOX, on_cluster=False)
    profile = MachineProfile.add(key, SweepMeasure.of("s", SHAPE, CALIBRATED, measured_sweep(), wall_ratio=1.3))
    here = profile.applied(CALIBRATED, SHAPE)
    without = replace(here, wall_ratio=1.0)
    assert forecast_sweep(plan, here).expected.wall_seconds == pytest.approx(
        1.3 * forecast_sweep(plan, without).expected.wall_seconds
    )
    # The dollars count the trials' own time, which the ratio does not touch.
    assert forecast_sweep(plan, here).expected.usd == pytest.approx(forecast_sweep(plan, without).expected.usd)
