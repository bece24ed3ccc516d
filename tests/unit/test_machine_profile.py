"""What a calibration cannot see, kept per machine and sweep shape from the sweeps that ran
there (sweeper/plan/machine_profile.py), and the next forecast that applies it."""

import json
from dataclasses import replace

import pytest

from sweeper.cost.throughput import RAY_TRIAL_START_SECONDS, TrialTiming
from sweeper.plan.forecast import forecast_sweep, ladder_as_run, with_spread
from sweeper.plan.forecast_lines import forecast_lines
from sweeper.plan.live import Measured
from sweeper.plan.machine_profile import KEPT, PROFILES_ENV, MachineProfile, SweepMeasure, machine_key, sweep_shape
from sweeper.plan.sweep_plan import make_plan
from tests.unit.test_forecast import CPU_BOX, quickstart_like

# As calibrated: 0.1 s per step, 0.5 s per evaluation, a start of 2 s (1 s the loop's own
# setup, 1 s Ray's part as modelled).
CALIBRATED = TrialTiming(0.1, 0.5, 1.0 + RAY_TRIAL_START_SECONDS, "calibrated", 0.3, 0.5, 1.2)
PLAN = make_plan(quickstart_like(), CPU_BOX)  # 10 to step 10, 3 to 30, 1 to 90; 2 at once
SHAPE = sweep_shape(PLAN)
KEY = machine_key(CPU_BOX, on_cluster=False)


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


def kept(shape: str = SHAPE, wall_ratio: float | None = 1.25, **sums) -> MachineProfile:
    return MachineProfile.add(KEY, SweepMeasure.of("s", shape, CALIBRATED, measured_sweep(**sums), wall_ratio))


def test_a_sweep_keeps_what_it_measured_against_its_calibration():
    assert SHAPE == "sft, 1 worker(s) per trial, 2 at once, 90 steps evaluated every 10"
    measure = SweepMeasure.of("quickstart", SHAPE, CALIBRATED, measured_sweep(), wall_ratio=1.25)
    assert measure.step_ratio == pytest.approx(1.2) and measure.eval_ratio == pytest.approx(1.6)
    # A later run's start, 2.5 s, less the loop's own calibrated setup (1 s).
    assert measure.ray_start_seconds == pytest.approx(1.5)
    assert measure.cold_start_seconds == pytest.approx(1.0)
    assert (measure.stop_seconds, measure.turnaround_seconds) == (pytest.approx(0.4), pytest.approx(0.9))
    assert (measure.shape, measure.wall_ratio) == (SHAPE, 1.25)
    assert SweepMeasure.of("nothing", SHAPE, CALIBRATED, Measured()) is None
    assert measure.alone_ratio is None  # no interval trained alone


def test_a_sweeps_trials_alone_are_kept_as_their_speed_against_beside_others():
    measured = measured_sweep()  # beside others: 1.2 s for 10 steps, 0.8 s for the rest
    measured.add_interval(10, 1.0, 0.6, alone=True)  # alone: 1.6 s for what took 2.0 s
    measure = SweepMeasure.of("quickstart", SHAPE, CALIBRATED, measured, wall_ratio=1.25)
    assert measure.alone_ratio == pytest.approx(0.8)
    assert measure.step_ratio == pytest.approx(1.2)  # the interval alone is not among the steps beside others
    profile = MachineProfile.add(KEY, measure)
    assert profile.applied(CALIBRATED).alone_ratio == pytest.approx(0.8)
    assert "a trial alone in x0.80 of its time beside others" in profile.line()
    assert not profile.line().endswith("modelled constants")


def test_the_next_forecast_applies_the_median_of_the_last_sweeps_of_its_shape():
    assert MachineProfile.load(KEY, SHAPE) is None
    # One sweep under a passing load (steps at 3x) among ordinary ones moves no figure.
    for step in (0.12, 0.3, 0.12):
        kept(step=step)
    here = MachineProfile.load(KEY, SHAPE).applied(CALIBRATED)
    assert here.step_seconds == pytest.approx(0.12) and here.eval_seconds == pytest.approx(0.8)
    assert here.setup_seconds == pytest.approx(1.0 + 1.5)  # the loop's setup, then Ray's part as measured
    assert (here.stop_seconds, here.turnaround_seconds, here.cold_start_seconds, here.wall_ratio) == (
        pytest.approx(0.4), pytest.approx(0.9), pytest.approx(1.0), 1.25
    )
    assert "as this machine's last 3 sweep(s) of its shape ran it" in here.source
    for _ in range(KEPT):
        kept(step=0.2)
    assert len(MachineProfile.load(KEY, SHAPE).sweeps) == KEPT
    assert MachineProfile.load(KEY, SHAPE).applied(CALIBRATED).step_seconds == pytest.approx(0.2)


def test_a_sweep_of_another_shape_or_machine_moves_nothing(profiles):
    """On the 2-core machine steps ran at 1.2-1.5x the calibration's in the 90-step
    quickstart and at 1.06-1.17x in a sweep of 1,800 steps."""
    long_like = quickstart_like(training={"max_steps": 1800, "eval_every": 60}, early_stopping={"grace_period": 60})
    long = sweep_shape(make_plan(long_like, CPU_BOX))
    two_workers = sweep_shape(make_plan(quickstart_like(resources={"workers_per_trial": 2}), CPU_BOX))
    assert len({SHAPE, long, two_workers}) == 3
    kept(long, step=0.3)
    assert MachineProfile.load(KEY, SHAPE) is None
    assert MachineProfile.load(KEY, long).applied(CALIBRATED).step_seconds == pytest.approx(0.3)
    for _ in range(KEPT):  # the last KEPT of one shape do not push out another's
        kept(two_workers)
    assert len(MachineProfile.load(KEY, long).sweeps) == 1
    assert MachineProfile.load(machine_key(CPU_BOX, on_cluster=True), long) is None
    (path,) = profiles.glob("*.json")
    assert json.loads(path.read_text())["machine"] == KEY
    path.write_text("{not json")
    assert MachineProfile.load(KEY, long) is None


def test_sweep_plan_says_which_figures_this_machines_sweeps_measured():
    profile = kept()
    timing = profile.applied(CALIBRATED)
    forecast = with_spread(forecast_sweep(PLAN, timing), PLAN, [(timing, timing)] * 2)
    forecast = replace(forecast, machine_note=profile.line())
    (line,) = [line for line in forecast_lines(forecast, "CPU core-hours") if line.startswith("Measured")]
    assert line.startswith(
        "Measured: step time, evaluation time, the training loop's setup (calibration); what a sweep adds, on this "
        "machine's last 1 sweep of this shape (median): Ray's part of a trial start (1.5 s), a trial's stop (0.4 s), a "
        "slot's turnaround (0.9 s), the first wave's cold start (1.0 s), steps in a sweep x1.20, evaluations in a "
        "sweep x1.60, the wall time x1.25 of the slot arithmetic's; modelled: which trials early stopping stops"
    ), line
    # The forecast grows with what the sweeps measured: slower steps and evaluations, dearer starts.
    assert forecast.expected.usd > forecast_sweep(PLAN, CALIBRATED).expected.usd
    other = sweep_shape(make_plan(quickstart_like(resources={"workers_per_trial": 2}), CPU_BOX))
    assert kept(other, wall_ratio=None).line().endswith("; the rest as modelled constants")


def test_the_wall_time_the_slot_arithmetic_misses_scales_the_next_forecasts_wall():
    # Trials that ended at these steps trained into each segment as the expected ladder says.
    assert ladder_as_run(PLAN, [10] * 7 + [30] * 2 + [90]) == [(10, 10), (30, 3), (90, 1)]
    # A sweep cut by a cap: fewer trials, one stopped inside the last segment.
    assert ladder_as_run(PLAN, [10] * 4 + [30, 50]) == [(10, 6), (30, 2), (90, 1)]
    here = kept(wall_ratio=1.3).applied(CALIBRATED)
    without = replace(here, wall_ratio=1.0)
    assert forecast_sweep(PLAN, here).expected.wall_seconds == pytest.approx(
        1.3 * forecast_sweep(PLAN, without).expected.wall_seconds
    )
    # The dollars count the trials' own time, which the ratio does not touch.
    assert forecast_sweep(PLAN, here).expected.usd == pytest.approx(forecast_sweep(PLAN, without).expected.usd)
