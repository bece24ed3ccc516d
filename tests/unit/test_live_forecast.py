"""The live forecast (sweeper/plan/live.py, sweeper/run/live_forecast.py), the budget
guard's commitments at its figures, and how sure `sweep plan` says it is."""

from dataclasses import replace

import pytest

from sweeper.cost.prices import Rate
from sweeper.cost.throughput import TrialTiming
from sweeper.names import TrialState
from sweeper.plan.forecast import TrialAt, forecast_sweep, remaining, with_spread
from sweeper.plan.forecast_lines import forecast_lines
from sweeper.plan.live import Measured, PriorWeight, blend, duration, estimate, live_timing
from sweeper.plan.sweep_plan import make_plan
from sweeper.run.budget_guard import BudgetGuard, BudgetSearcher
from sweeper.run.live_forecast import LiveForecast
from sweeper.spec.budget import BudgetSpec
from sweeper.track.book import SweepBook, TrialRecord
from tests.unit.test_budget import Counting
from tests.unit.test_forecast import CPU_BOX, TIMING, quickstart_like


def plan_and_forecast(copies: int = 2, **sections):
    """The quickstart-like ladder (10 to step 10, 3 to 30, 1 to 90; 2 slots) at TIMING
    (0.1 s per step, 0.5 s per evaluation, 1 s per start), calibrated by `copies` copies."""
    plan = make_plan(quickstart_like(**sections), CPU_BOX)
    return plan, with_spread(forecast_sweep(plan, TIMING), plan, [(TIMING, TIMING)] * copies)


# ------------------------------------------------------------ the estimator


def test_with_nothing_measured_the_estimate_is_the_calibrated_forecast():
    plan, forecast = plan_and_forecast()
    live = estimate(plan, forecast, Measured(), [])
    assert live.timing.step_seconds == TIMING.step_seconds and live.timing.eval_seconds == TIMING.eval_seconds
    assert live.left == forecast.expected
    assert live.total_usd == pytest.approx(forecast.expected.usd)
    assert "calibrated; nothing measured yet" in live.line()


def test_the_estimate_converges_to_the_measured_rate():
    weight = PriorWeight.of(plan_and_forecast(copies=2)[1])
    assert (weight.steps, weight.evaluations, weight.starts) == (10, 2, 2)  # 5 steps, 1 evaluation, 1 start a copy
    measured = Measured()
    measured.add_interval(10, 2.0, 1.0)  # 0.2 s per step, 1 s per evaluation: twice the calibration
    timing = live_timing(TIMING, measured, weight)
    assert timing.step_seconds == pytest.approx((10 * 0.1 + 2.0) / 20)  # half way after as many steps as the prior
    assert timing.eval_seconds == pytest.approx((2 * 0.5 + 1.0) / 3)
    for _ in range(999):
        measured.add_interval(10, 2.0, 1.0)
    timing = live_timing(TIMING, measured, weight)
    assert timing.step_seconds == pytest.approx(0.2, rel=1e-3) and timing.eval_seconds == pytest.approx(1.0, rel=1e-2)
    assert timing.setup_seconds == TIMING.setup_seconds  # no start measured: the calibration's


def test_a_modelled_prior_counts_as_one_observation():
    plan = make_plan(quickstart_like(), CPU_BOX)
    modelled = forecast_sweep(plan, TIMING)  # no calibration copies
    assert PriorWeight.of(modelled) == PriorWeight(1.0, 1.0, 1.0)
    assert blend(0.1, 1.0, 0.6, 3) == pytest.approx(0.7 / 4)


def test_what_is_left_follows_the_ladder_from_where_the_trials_stand():
    plan, _ = plan_and_forecast()
    ladder = [(10, 10), (30, 3), (90, 1)]
    # 7 trials started: 4 paused at the first rung, one promoted and at step 20 now, one
    # paused at the second rung (30), one running at step 5; 3 not started. 2 slots.
    trials = [TrialAt(10, False)] * 4 + [TrialAt(20, True), TrialAt(30, False), TrialAt(5, True)]
    left = remaining(plan, TIMING, ladder, True, trials)
    # Segment to 10: the trial at 5 trains 5 more, the 3 missing all 10 (and start).
    # Segment to 30: 1 reached it, the one at 20 trains 10 more, 1 missing trains 20 (and starts).
    # Segment to 90: 1 missing trains 60 (and starts).
    assert left.steps == 5 + 3 * 10 + 10 + 20 + 60
    start = TIMING.setup_seconds + TIMING.stop_seconds  # 1 s
    at_5, first_rung = 5 * 0.1 + 0.5, start + 10 * 0.1 + 0.5  # 1 s, 2.5 s
    at_20, second = 10 * 0.1 + 0.5, start + 20 * 0.1 + 1.0  # 1.5 s, 4 s
    last = start + 60 * 0.1 + 3.0  # 10 s
    assert left.trial_seconds == pytest.approx(at_5 + 3 * first_rung + at_20 + second + last)
    # On the 2 slots: the trial at 5 frees its slot at 1 s, the one at 20 at 1.5 s; the 3
    # first-rung runs end at 3.5, 4 and 6 s. The second rung's third promotion waits for 9
    # trials ranked at step 10 (floor(9 / 3) = 3): the 9th arrives at 4 s (4 to 8 s). The
    # last segment's run waits for 3 at step 30, the last of them that run (8 to 18 s).
    assert left.wall_seconds == pytest.approx(18.0)


def test_a_promoted_trial_trains_beside_the_first_rungs_runs():
    plan, _ = plan_and_forecast()
    # One trial promoted and running at 10 toward 30; the first rung's last 2 runs on the other slot.
    trials = [TrialAt(10, False)] * 7 + [TrialAt(10, True)]
    left = remaining(plan, TIMING, [(10, 10), (30, 3), (90, 1)], True, trials)
    first_rung, at_10 = 1.0 + 10 * 0.1 + 0.5, 20 * 0.1 + 2 * 0.5  # 2.5 s, 3 s
    second, last = 1.0 + 20 * 0.1 + 1.0, 1.0 + 60 * 0.1 + 3.0  # 4 s, 10 s
    # 8 ranked at step 10 allow 2 promotions: the second starts on the free slot before any
    # new trial (0 to 4 s). The first rung's 2 runs follow on the slots as they free (3 to
    # 5.5 s, 4 to 6.5 s); the 9th arrival at 5.5 s lets the third promotion go (5.5 to 9.5
    # s), and the last segment's run waits for the three at step 30 (9.5 to 19.5 s).
    assert left.wall_seconds == pytest.approx(at_10 + first_rung + second + last)
    assert at_10 < 2 * first_rung  # the promoted trial's rest was beside them, not after


def test_failed_trials_leave_the_ladder_and_a_finished_sweep_has_nothing_left():
    plan, forecast = plan_and_forecast()
    done = [TrialAt(10, False)] * 9 + [TrialAt(90, False)]
    assert estimate(plan, forecast, Measured(), done).left.steps == (3 - 1) * 20  # 2 of 3 expected to step 30 missing
    # With 4 trials failed, 6 are left for the ladder: 6 to 10, 2 to 30, 1 to 90.
    six = [TrialAt(10, False)] * 5 + [TrialAt(90, False)]
    assert estimate(plan, forecast, Measured(), six, failed=4).left.steps == 20
    everything = [TrialAt(10, False)] * 7 + [TrialAt(30, False)] * 2 + [TrialAt(90, False)]
    assert estimate(plan, forecast, Measured(), everything).left.wall_seconds == 0


def test_a_sweep_whose_every_trial_failed_has_nothing_left():
    # The live estimate after the only trial's workers could not be placed (CI, session 25:
    # a ladder of 0 trials still sent 1 on from the first rung, and the slot schedule
    # failed on the gate no arrival could open).
    plan, forecast = plan_and_forecast(search={"num_trials": 1})
    for trials in ([], [TrialAt(0, False)]):
        left = estimate(plan, forecast, Measured(), trials, failed=1).left
        assert (left.steps, left.wall_seconds) == (0, 0)


def test_the_eta_line_reads_as_the_issue_asks():
    assert duration(190) == "3 min 10 s" and duration(42.4) == "42 s" and duration(7500) == "2 h 05 min"
    plan, forecast = plan_and_forecast()
    measured = Measured()
    measured.add_interval(10, 1.5, 0.6)
    line = estimate(plan, forecast, measured, [TrialAt(10, True)], elapsed_seconds=5, spent_usd=0.01).line()
    assert line.startswith("ETA ") and " to go of $" in line and "expected (10 steps measured: 125.0 ms per step" in line


# ------------------------------------------------------------ measured from the reports


class Clock:
    def __init__(self):
        import time

        self.now = time.time()  # a trial's wall time is counted on the real clock

    def __call__(self):
        return self.now


class Logged:
    def __init__(self):
        self.metrics = []

    def log_sweep_metrics(self, metrics, step):
        self.metrics.append((step, metrics))


class Shown:
    def __init__(self):
        self.lines = []

    def forecast(self, line):
        self.lines.append(line)


def report(step, train_seconds):
    return {"step": step, "train_tokens": 1000.0, "tokens_per_second": 1000.0 / train_seconds, "eval_loss": 1.0}


def test_the_listener_measures_starts_steps_and_evaluations_and_logs_at_each_evaluation():
    plan, forecast = plan_and_forecast()
    clock, logged, shown = Clock(), Logged(), Shown()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), logged, shown, clock)
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    assert logged.metrics[0][0] == 0  # the calibrated forecast at step 0
    # A trial running at step 0: the calibrated forecast less the first wave's cold start and its start.
    calibrated = estimate(plan, forecast, Measured(), [TrialAt(0, True)])
    # (What is left, not the total: the trial's spend so far runs on the real clock, which
    # a loaded machine moves by more than the comparison's tolerance.)
    assert logged.metrics[0][1]["forecast_remaining_usd"] == pytest.approx(calibrated.left.usd, rel=1e-6)
    # Another trial trains beside it from here on: its intervals are the figures beside others.
    book.trials["n"] = TrialRecord(trial_id="n", number=9, params={}, started_at=clock.now)
    clock.now += 4.0  # start 1.5 s + 10 steps of 0.2 s + an evaluation (0.5 s, the estimate so far)
    record.history.append(report(10, 2.0))
    live.trial_result(record)
    # The first wave's run: a cold start (TIMING adds no cold second apart).
    assert live.measured.cold_starts == 1 and live.measured.cold_start_seconds == pytest.approx(4.0 - 2.0 - 0.5)
    clock.now += 3.0  # 10 steps of 0.2 s, 1 s for the rest
    record.history.append(report(20, 2.0))
    live.trial_result(record)
    assert live.measured.steps == 20 and live.measured.train_seconds == pytest.approx(4.0)
    assert live.measured.evaluations == 1 and live.measured.eval_seconds == pytest.approx(1.0)
    assert [step for step, _ in logged.metrics] == [0, 1, 2]
    clock.now += 0.25  # the run pauses at a rung a quarter second after its report
    record.state = TrialState.PAUSED
    live.trial_paused(record)
    clock.now += 0.5  # and another trial takes the slot half a second later
    other = TrialRecord(trial_id="b", number=2, params={}, started_at=clock.now)
    book.trials["b"] = other
    live.trial_started(other)
    assert (live.measured.stops, live.measured.stop_seconds) == (1, pytest.approx(0.25))
    assert (live.measured.turnarounds, live.measured.turnaround_seconds) == (1, pytest.approx(0.5))
    assert live.timing().stop_seconds == pytest.approx((TIMING.stop_seconds + 0.25) / 2)  # a constant weighs one
    step_2 = logged.metrics[2][1]
    assert set(step_2) >= {"forecast_remaining_s", "forecast_remaining_usd", "forecast_total_usd", "forecast_total_s"}
    assert step_2["forecast_live_step_seconds"] == pytest.approx((10 * 0.1 + 4.0) / 30)
    assert shown.lines[-1].startswith("ETA ") and "20 steps measured" in shown.lines[-1]


def test_estimates_take_at_most_their_share_of_the_drivers_time_and_every_evaluation_is_still_logged():
    # An estimate walks every trial, so at thousands of trials it costs milliseconds at each
    # of the driver's events; between estimates an event shows and logs the latest one.
    plan, forecast = plan_and_forecast()
    clock, logged = Clock(), Logged()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), logged, clock=clock)
    walked = []
    real_current = live.current

    def costly_current():  # an estimate that takes 1 s of the driver's clock
        walked.append(clock.now)
        clock.now += 1.0
        return real_current()

    live.current = costly_current
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    first = live.latest
    for step in range(10, 91, 10):  # a report every 2.5 s
        clock.now += 2.5
        record.history.append(report(step, 1.0))
        live.trial_result(record)
    # 1 s at the start, then again once that 1 s is within 5% of the time since (20 s on),
    # and not a third time before 40 s.
    assert len(walked) == 2 and walked[1] - walked[0] >= 1.0 / LiveForecast.ESTIMATE_SHARE
    assert live.latest is not first
    # Every evaluation is logged all the same, the latest estimate at its step.
    assert [step for step, _ in logged.metrics] == list(range(10))
    assert logged.metrics[1][1]["forecast_remaining_s"] == first.left.wall_seconds
    # What the budget guard commits trials at is measured at every report.
    assert live.measured.steps + live.measured.alone_steps == 90


def one_trial_started():
    """(plan, forecast, clock, listener, record): the quickstart-like sweep with one trial started."""
    plan, forecast = plan_and_forecast()
    clock = Clock()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), clock=clock)
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    return plan, forecast, clock, live, record


def test_a_trial_that_has_just_reported_at_a_rung_is_counted_as_waiting_there_not_training_on():
    # Most trials are paused or stopped at a rung; counted as training on into the next
    # segment, the estimate fell by one of its runs at every rung report and rose again.
    plan, forecast, clock, live, record = one_trial_started()  # rungs at steps 10 and 30
    clock.now += 4.0
    record.history.append(report(10, 2.0))
    live.trial_result(record)

    def left_if(running: bool) -> float:
        return estimate(plan, forecast, live.measured, [TrialAt(10, running)]).left.wall_seconds

    assert left_if(True) < left_if(False)  # the two readings differ, so the check below can fail
    assert live.latest.left.wall_seconds == pytest.approx(left_if(False))
    # Promoted, it trains on in a new Train run: once started, it is inside the next segment.
    live.trial_paused(record)
    record.state = TrialState.RUNNING
    live.trial_started(record)
    assert live.latest.left.wall_seconds == pytest.approx(left_if(True))


def test_intervals_trained_alone_are_measured_apart_and_the_rest_alone_runs_at_their_speed():
    plan, forecast, clock, live, record = one_trial_started()  # 2 slots, no other trial
    clock.now += 4.0
    record.history.append(report(40, 3.0))
    live.trial_result(record)  # the run's start
    for step in (50, 60):  # alone: 10 steps of 0.08 s and 0.4 s for the rest, 0.8 of TIMING's 1.5 s
        clock.now += 1.2
        record.history.append(report(step, 0.8))
        live.trial_result(record)
    m = live.measured
    assert (m.steps, m.evaluations, m.alone_steps, m.alone_evaluations) == (40, 0, 20, 2)
    assert m.alone_seconds == pytest.approx(2.4)
    # The prior (1.0) weighs the calibration's 10 steps and 2 evaluations at the live figures.
    timing = live.timing()
    prior = 10 * timing.step_seconds + 2 * timing.eval_seconds
    beside_others = 20 * timing.step_seconds + 2 * timing.eval_seconds
    assert timing.alone_ratio == pytest.approx((prior + 2.4) / (prior + beside_others))
    assert timing.alone_ratio < 1.0
    # What is left of a trial running alone takes its time at that ratio; the rungs' runs
    # still to come, two at a time, do not.
    alone = estimate(plan, forecast, m, [TrialAt(60, True)])
    as_fast = estimate(plan, replace(forecast, timing=replace(forecast.timing, alone_ratio=timing.alone_ratio)), Measured(), [TrialAt(60, True)])
    assert alone.timing.alone_ratio == pytest.approx(timing.alone_ratio)
    assert as_fast.left.wall_seconds < estimate(plan, forecast, Measured(), [TrialAt(60, True)]).left.wall_seconds


def test_the_first_waves_starts_are_measured_without_their_cold_start():
    plan, forecast = plan_and_forecast()  # 2 slots
    cold = 1.0
    forecast = replace(forecast, timing=replace(TIMING, cold_start_seconds=cold))
    clock = Clock()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), clock=clock)
    records = [TrialRecord(trial_id=t, number=n, params={}) for n, t in enumerate("abc")]
    for record in records:
        book.trials[record.trial_id] = record
        live.trial_started(record)  # a and b: the first wave; c: a later run
    clock.now += 4.0
    for record in records:
        record.history.append(report(10, 2.0))
        live.trial_result(record)
    # 4 s less 2 s of steps and the evaluation's 0.5 s: the first two apart, as cold starts.
    assert (live.measured.starts, live.measured.start_seconds) == (1, pytest.approx(4.0 - 2.0 - 0.5))
    assert (live.measured.cold_starts, live.measured.cold_start_seconds) == (2, pytest.approx(2 * (4.0 - 2.0 - 0.5)))
    # The start's estimate counts them less the cold second the forecast adds apart (the
    # prior, 1 s, weighs the 2 calibration copies).
    expected = (2 * TIMING.setup_seconds + 2 * (4.0 - 2.0 - 0.5 - cold) + (4.0 - 2.0 - 0.5)) / (2 + 3)
    assert live.timing().setup_seconds == pytest.approx(expected)


# ------------------------------------------------------------ the cap at the live figures


def test_the_cap_commits_trials_at_the_live_figures_once_measured():
    # Calibrated: a new trial's first rung is 1 + 10 x 0.1 + 0.5 = 2.5 s ($0.0025); spent $0.010.
    plan, forecast = plan_and_forecast()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    paused = TrialRecord(trial_id="p", number=1, params={}, state=TrialState.PAUSED, started_at=0, ended_at=10)
    paused.history.append({"step": 10})
    running = TrialRecord(trial_id="r", number=2, params={}, state=TrialState.RUNNING)
    running.started_at, running.history = running.started_at - 0.0, [{"step": 30}]
    book.trials = {"p": paused, "r": running}
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6))
    guard = BudgetGuard(
        budget=BudgetSpec(max_usd=0.0275), book=book, rate=Rate("cpu", 1, 3.6), timing=TIMING,
        milestones=[10, 30, 90], eval_every=10, num_trials=10, live=live,
    )
    # Running trial from 30 to 90: 60 x 0.1 + 6 x 0.5 = 9 s; with the new trial's 2.5 s: $0.0215 committed.
    assert guard.first_rung_seconds() == pytest.approx(2.5)
    assert BudgetSearcher(Counting(), guard).suggest("a") == {"x": 1}
    # Measured: steps at three times the calibration (the prior weighs 10 of 1010 steps).
    for _ in range(100):
        live.measured.add_interval(10, 3.0, 0.5)
    timing = guard.commit_timing()
    assert timing.step_seconds == pytest.approx((10 * 0.1 + 300) / 1010)
    assert guard.seconds_to_next_rung(30) == pytest.approx(60 * timing.step_seconds + 6 * timing.eval_seconds)
    guard.suggested.clear()
    # Now the running trial's 60 steps alone cost about $0.018 more: the new trial is held back.
    assert BudgetSearcher(Counting(), guard).suggest("b") is None
    assert guard.held_back_by == "max_usd"


def test_the_guard_pickles_without_the_live_forecast():
    import pickle

    plan, forecast = plan_and_forecast()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), Logged(), Shown())
    guard = BudgetGuard(BudgetSpec(max_usd=1.0), book, Rate("cpu", 1, 3.6), TIMING, [10, 30, 90], 10, 10, live=live)
    restored = pickle.loads(pickle.dumps(guard))
    assert restored.live is None and restored.commit_timing() == TIMING
    del restored.__dict__["live"]  # as a guard pickled by a driver before the live forecast
    del restored.__dict__["saved_commit_timing"]
    assert restored.commit_timing() == TIMING
    assert pickle.loads(pickle.dumps(live)).tracker is None


def test_a_resumed_sweeps_guard_commits_trials_at_what_its_earlier_driver_measured():
    """Tune saves the guard without its live forecast; `sweep resume` restores it with none.
    Its commitments go on at the figures measured before the save, not the calibration."""
    import pickle

    plan, forecast = plan_and_forecast()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6))
    guard = BudgetGuard(BudgetSpec(max_usd=1.0), book, Rate("cpu", 1, 3.6), TIMING, [10, 30, 90], 10, 10, live=live)
    for _ in range(100):
        live.measured.add_interval(10, 3.0, 0.5)  # steps at three times the calibration
    measured = guard.commit_timing()
    assert measured.step_seconds > 2 * TIMING.step_seconds

    restored = pickle.loads(pickle.dumps(guard))
    assert restored.live is None
    assert restored.commit_timing() == measured
    assert restored.first_rung_seconds() == pytest.approx(guard.first_rung_seconds())


# ------------------------------------------------------------ how sure `sweep plan` is


def test_the_plan_says_its_spread_and_what_is_measured_and_what_modelled():
    plan = make_plan(quickstart_like(), CPU_BOX)
    slow = TrialTiming(0.12, 0.6, 1.2, "test", 0.0, 0.0, 0.0)
    forecast = with_spread(forecast_sweep(plan, TIMING), plan, [(TIMING, TIMING), (slow, slow)])
    lines = forecast_lines(forecast, "CPU core-hours")
    spread = next(line for line in lines if line.startswith("Spread"))
    assert spread.startswith("Spread across the 2 copies: 100.0-120.0 ms per step, 500-600 ms per evaluation, 1.0-1.2 s per start")
    assert f"{forecast.spread.low.usd:.6f}" in spread and f"{forecast.spread.high.usd:.6f}" in spread
    assert forecast.spread.low.usd < forecast.spread.high.usd
    measured = next(line for line in lines if line.startswith("Measured"))
    assert measured.startswith(
        "Measured: step time, evaluation time, the training loop's setup; modelled (no sweep of this shape has "
        "ended on this machine yet): Ray's part"
    )
    assert "which trials early stopping stops (the rung ladder)" in measured
    one_copy = forecast_lines(with_spread(forecast_sweep(plan, TIMING), plan, [(TIMING, TIMING)]), "CPU core-hours")
    assert any(line.startswith("Spread: one copy measured") for line in one_copy)
    modelled = forecast_lines(forecast_sweep(plan, TIMING), "CPU core-hours")
    assert any(line.startswith("Spread: none measured (throughput model)") for line in modelled)
    assert any(line.startswith("Measured: nothing; modelled: step and evaluation time") for line in modelled)


def test_the_live_table_shows_the_eta_under_the_table_and_prints_it_to_a_pipe():
    import io

    from rich.console import Console

    from sweeper.track.console import LiveTable

    out = io.StringIO()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    table = LiveTable(book, [], Console(file=out, width=200))  # a file: no terminal
    line = "ETA 3 min 10 s, $0.410000 to go of $1.20 expected (140 steps measured)"
    table.forecast(line)
    table.forecast("ETA 3 min 9 s, ...")  # within ETA_PRINT_SECONDS of the last: not printed again
    assert out.getvalue().splitlines() == [line]
    assert table._render().caption.plain == "ETA 3 min 9 s, ..."
    record = TrialRecord(trial_id="a", number=1, params={}, state=TrialState.COMPLETED)
    table.trial_finished(record)  # a finished trial's line, then the latest ETA
    assert out.getvalue().splitlines()[-1] == "ETA 3 min 9 s, ..."
    table.waiting(["waiting on trial 2"])
    assert table._render().caption.plain == "ETA 3 min 9 s, ...\nwaiting on trial 2"


# ------------------------------------------------------------ the report


def test_the_report_draws_the_live_forecast_against_the_actual():
    from dataclasses import replace as with_fields

    import polars as pl

    from reports.figures import forecast_figure
    from tests.unit.test_reports import _with_totals, make_sweep

    data = make_sweep()
    assert forecast_figure(data) is None  # no live forecast on the parent run
    frame = pl.DataFrame({
        "step": [0, 1, 2], "forecast_elapsed_s": [0.0, 40.0, 90.0], "forecast_remaining_s": [100.0, 80.0, 30.0],
        "forecast_total_usd": [1.0, 1.3, 1.25],
    })
    data = with_fields(data, forecast=frame)
    totals = {**data.record.totals, "wall_seconds": 130.0}
    figure = forecast_figure(with_fields(data, record=_with_totals(data.record, totals)))
    forecast_usd, actual_usd, eta, actual_left = figure.data
    assert list(forecast_usd.x) == [0.0, 40.0, 90.0] and list(forecast_usd.y) == [1.0, 1.3, 1.25]
    assert list(actual_usd.y) == [1.23, 1.23]  # cost_usd_total
    assert list(eta.y) == [100.0, 80.0, 30.0] and list(actual_left.x) == [0, 130.0] and list(actual_left.y) == [130.0, 0]
    # A running sweep (no totals yet) has no actual to draw against.
    assert forecast_figure(with_fields(data, record=_with_totals(data.record, {}))) is None


def test_what_is_left_stops_at_the_tightest_budget_cap():
    """A sweep of more trials than its cap buys ends near the cap (the guard starts no trial
    and lets none go on past it): what is left is what the tightest cap leaves, every figure
    in one proportion; a cap that the ladder stays under changes nothing."""
    plan, forecast = plan_and_forecast()
    uncapped = estimate(plan, forecast, Measured(), [TrialAt(10, True)], spent_usd=0.0).left
    usd_cap = uncapped.usd / 4
    capped_plan, capped_forecast = plan_and_forecast(budget={"max_usd": usd_cap, "max_steps": 10_000})
    spent = usd_cap / 2  # half the cap used: an eighth of the uncapped rest fits
    left = estimate(capped_plan, capped_forecast, Measured(), [TrialAt(10, True)], spent_usd=spent).left
    assert left.usd == pytest.approx(usd_cap - spent)
    # That work runs on the 2 slots, full until the cap: its trials' time over 2, less than
    # an eighth of the whole ladder's wall, whose end has one trial running.
    assert left.wall_seconds == pytest.approx(uncapped.trial_seconds / 8 / 2)
    assert left.wall_seconds < uncapped.wall_seconds / 8
    assert left.steps == round(uncapped.steps / 8)
    # The step cap binds first once fewer steps are left under it than the dollars allow.
    left = estimate(capped_plan, capped_forecast, Measured(), [TrialAt(10, True)], spent_usd=spent, spent_steps=9_990).left
    assert left.steps == 10 and left.usd == pytest.approx(uncapped.usd * 10 / uncapped.steps)
    crossed = estimate(capped_plan, capped_forecast, Measured(), [TrialAt(10, True)], spent_usd=2 * usd_cap).left
    assert crossed.wall_seconds == 0 and crossed.usd == 0
    # A wall-hours cap that binds leaves exactly what it has left.
    hours_plan, hours_forecast = plan_and_forecast(budget={"max_hours": uncapped.wall_seconds / 2 / 3600})
    by_hours = estimate(hours_plan, hours_forecast, Measured(), [TrialAt(10, True)], elapsed_seconds=10.0).left
    assert by_hours.wall_seconds == pytest.approx(uncapped.wall_seconds / 2 - 10.0)
    loose_plan, loose_forecast = plan_and_forecast(budget={"max_usd": 100 * uncapped.usd})
    assert estimate(loose_plan, loose_forecast, Measured(), [TrialAt(10, True)]).left == uncapped


def test_the_forecast_before_launch_stops_at_the_cap_as_the_live_estimate_does():
    """A sweep of search.num_trials capped below its expected cost: the forecast printed
    before launch is the live estimate with nothing started (cut at the cap), and the
    budget's line still says the cap cuts the whole sweep."""
    from sweeper.plan.budget import budget_lines

    plan, forecast = plan_and_forecast()
    usd_cap = forecast.expected.usd / 2
    capped_plan, capped = plan_and_forecast(budget={"max_usd": usd_cap})
    assert capped.cut_by == "max_usd" and capped.uncapped == forecast.expected
    assert capped.expected.usd == pytest.approx(usd_cap)
    assert capped.expected.wall_seconds == pytest.approx(forecast.expected.trial_seconds / 2 / 2)  # on 2 full slots
    assert estimate(capped_plan, capped, Measured(), []).left == capped.expected
    assert capped.spread.high.usd == pytest.approx(usd_cap)  # the slowest copy's case is cut too
    lines = forecast_lines(capped, "CPU core-hours")
    assert any(line.startswith("Expected (budget.max_usd stops it at about 50% of all its trials' expected work)")
               for line in lines), lines
    (cap_line,) = budget_lines(capped_plan.spec.budget, capped)
    assert f"against {forecast.expected.usd:.4g} expected" in cap_line and cap_line.endswith("expected to be cut by it")
    # A cap the sweep stays under changes nothing.
    _, loose = plan_and_forecast(budget={"max_usd": 10 * forecast.expected.usd})
    assert loose.expected == forecast.expected and loose.uncapped is None and loose.cut_by is None
