"""The live forecast (sweeper/budget/_live_forecast.py): the forecast's figures replaced by
the sweep's own as trials report, what is left from where the trials stand, and the
budget guard's commitments at those figures."""

import pytest

from sweeper.cost._prices import Rate
from sweeper.names import TrialState
from sweeper.plan._forecast import Scenario, TrialAt, forecast_lines, forecast_sweep, remaining
from sweeper.plan._sweep_plan import make_plan
from sweeper.budget._guard import BudgetGuard, BudgetSearcher
from sweeper.budget._live_forecast import LiveForecast, Measured, estimate, live_timing
from sweeper.views import duration
from sweeper.spec._sections import BudgetSpec
from sweeper.track._book import SweepBook, TrialRecord
from tests.unit.test_budget import Counting
from tests.unit.test_forecast import CPU_BOX, TIMING, quickstart_like


def plan_and_forecast(**sections):
    """The quickstart-like ladder (10 to step 10, 3 to 30, 1 to 90; 2 slots) at TIMING
    (0.1 s per step, 0.5 s per evaluation, 1 s per start)."""
    plan = make_plan(quickstart_like(**sections), CPU_BOX)
    return plan, forecast_sweep(plan, TIMING)


def spent(usd=0.0, steps=10, elapsed=0.0) -> Scenario:
    return Scenario(steps, 0.0, elapsed, 0.0, usd)


# ------------------------------------------------------------ the estimator


def test_with_nothing_measured_the_estimate_is_the_forecast():
    plan, forecast = plan_and_forecast()
    live = estimate(plan, forecast, Measured(), [])
    assert live.timing.step_seconds == TIMING.step_seconds and live.timing.eval_seconds == TIMING.eval_seconds
    assert live.left == forecast.expected
    assert live.total_usd == pytest.approx(forecast.expected.usd)
    assert "forecast; nothing measured yet" in live.line()


def test_each_figure_the_sweep_measured_replaces_the_forecasts():
    # 0.2 s per step, 1 s per evaluation: twice the forecast.
    measured = Measured(steps=10, train_seconds=2.0, evaluations=1, eval_seconds=1.0)
    timing = live_timing(TIMING, measured)
    assert timing.step_seconds == pytest.approx(0.2) and timing.eval_seconds == pytest.approx(1.0)
    assert timing.setup_seconds == TIMING.setup_seconds  # no start measured: the forecast's
    measured = Measured(steps=30, train_seconds=5.0, evaluations=2, eval_seconds=1.0, starts=1, start_seconds=3.0)
    timing = live_timing(TIMING, measured)
    assert timing.step_seconds == pytest.approx(5.0 / 30) and timing.eval_seconds == pytest.approx(0.5)
    assert timing.setup_seconds == pytest.approx(3.0)


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
    at_5, first_rung = 5 * 0.1 + 0.5, 1.0 + 10 * 0.1 + 0.5  # 1 s, 2.5 s
    at_20, second = 10 * 0.1 + 0.5, 1.0 + 20 * 0.1 + 1.0  # 1.5 s, 4 s
    last = 1.0 + 60 * 0.1 + 3.0  # 10 s
    assert left.trial_seconds == pytest.approx(at_5 + 3 * first_rung + at_20 + second + last)
    # On the 2 slots (more than the longest run still to start).
    assert left.wall_seconds == pytest.approx(left.trial_seconds / 2)
    # Two runs to step 30 and the last one left: shared they take 9 s, but the last run
    # alone takes 10 s, which is the bound then.
    lone = remaining(plan, TIMING, ladder, True, [TrialAt(10, False)] * 9 + [TrialAt(30, False)])
    assert lone.trial_seconds == pytest.approx(2 * second + last) and lone.wall_seconds == pytest.approx(last)


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
    plan, forecast = plan_and_forecast(search={"num_trials": 1})
    for trials in ([], [TrialAt(0, False)]):
        left = estimate(plan, forecast, Measured(), trials, failed=1).left
        assert (left.steps, left.wall_seconds) == (0, 0)


def test_the_eta_line_reads_as_the_issue_asks():
    assert duration(190) == "3 min 10 s" and duration(42.4) == "42 s" and duration(7500) == "2 h 05 min"
    plan, forecast = plan_and_forecast()
    measured = Measured(steps=10, train_seconds=1.5, evaluations=1, eval_seconds=0.6)
    line = estimate(plan, forecast, measured, [TrialAt(10, True)], spent=spent(usd=0.01, elapsed=5)).line()
    assert line.startswith("ETA ") and " to go of $" in line and "expected (10 steps measured: 150.0 ms per step" in line


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
    live.ESTIMATE_EVERY_S = 0.0
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    assert logged.metrics[0][0] == 0  # the forecast at step 0
    forecast_left = estimate(plan, forecast, Measured(), [TrialAt(0, True)])
    assert logged.metrics[0][1]["forecast_remaining_usd"] == pytest.approx(forecast_left.left.usd, rel=1e-6)
    clock.now += 4.0  # start 1.5 s + 10 steps of 0.2 s + an evaluation (0.5 s, the estimate so far)
    record.history.append(report(10, 2.0))
    live.trial_result(record)
    assert live.measured.starts == 1 and live.measured.start_seconds == pytest.approx(4.0 - 2.0 - 0.5)
    clock.now += 3.0  # 10 steps of 0.2 s, 1 s for the rest
    record.history.append(report(20, 2.0))
    live.trial_result(record)
    assert live.measured.steps == 20 and live.measured.train_seconds == pytest.approx(4.0)
    assert live.measured.evaluations == 1 and live.measured.eval_seconds == pytest.approx(1.0)
    assert [step for step, _ in logged.metrics] == [0, 1, 2]
    step_2 = logged.metrics[2][1]
    assert set(step_2) >= {"forecast_remaining_s", "forecast_remaining_usd", "forecast_total_usd", "forecast_total_s"}
    assert step_2["forecast_live_step_seconds"] == pytest.approx(0.2)
    assert step_2["forecast_live_setup_seconds"] == pytest.approx(1.5)
    assert shown.lines[-1].startswith("ETA ") and "20 steps measured" in shown.lines[-1]


def test_the_generation_pass_the_trials_timed_replaces_the_forecasts():
    """A report that timed a generation pass (a generation section) counts it apart: its
    mean replaces the forecast's pass, and the interval's rest, less the pass, is the
    evaluation."""
    import dataclasses

    from trainables.metrics import GENERATION_SECONDS

    plan, forecast = plan_and_forecast()
    forecast = dataclasses.replace(forecast, timing=dataclasses.replace(TIMING, generation_seconds=5.0, generation_prompts=8))
    clock, shown = Clock(), Shown()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), Logged(), shown, clock)
    live.ESTIMATE_EVERY_S = 0.0
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    clock.now += 4.0
    record.history.append(report(10, 2.0))  # its start
    live.trial_result(record)
    assert live.timing().generation_seconds == 5.0  # none timed yet: the forecast's
    clock.now += 5.0  # 10 steps of 0.2 s, a 2 s generation pass, 1 s for the rest
    record.history.append({**report(20, 2.0), GENERATION_SECONDS: 2.0})
    live.trial_result(record)
    timing = live.timing()
    assert live.measured.generations == 1
    assert timing.generation_seconds == pytest.approx(2.0) and timing.eval_seconds == pytest.approx(1.0)
    assert "2.00 s per generation pass" in shown.lines[-1]


def test_estimates_come_at_most_once_a_second_and_every_evaluation_is_still_logged():
    plan, forecast = plan_and_forecast()
    clock, logged = Clock(), Logged()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), logged, clock=clock)
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    first = live.latest
    for step in range(10, 91, 10):  # a report every 0.25 s
        clock.now += 0.25
        record.history.append(report(step, 0.1))
        live.trial_result(record)
    assert [step for step, _ in logged.metrics] == list(range(10))
    assert logged.metrics[1][1]["forecast_remaining_s"] == first.left.wall_seconds  # within the second: the latest
    assert live.latest is not first  # re-estimated once a second had passed
    assert live.measured.steps == 90  # what the budget guard commits trials at: every report


def test_a_trial_that_has_just_reported_at_a_rung_is_counted_as_waiting_there_not_training_on():
    plan, forecast = plan_and_forecast()  # rungs at steps 10 and 30
    clock = Clock()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), clock=clock)
    live.ESTIMATE_EVERY_S = 0.0
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    clock.now += 4.0
    record.history.append(report(10, 2.0))
    live.trial_result(record)

    def left_if(running: bool) -> float:
        return estimate(plan, forecast, live.measured, [TrialAt(10, running)]).left.trial_seconds

    assert left_if(True) < left_if(False)  # the two readings differ, so the check below can fail
    assert live.latest.left.trial_seconds == pytest.approx(left_if(False))
    # Promoted, it trains on in a new Train run: once started, it is inside the next segment.
    live.trial_paused(record)
    record.state = TrialState.RUNNING
    live.trial_started(record)
    assert live.latest.left.trial_seconds == pytest.approx(left_if(True))


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
    assert guard.work_to_next_rung(0, start=True)[1] == pytest.approx(2.5)
    assert BudgetSearcher(Counting(), guard).suggest("a") == {"x": 1}
    # Measured: steps at three times the forecast's, which the sweep's own figure replaces.
    live.measured = Measured(steps=1000, train_seconds=300.0, evaluations=100, eval_seconds=50.0)
    timing = guard.commit_timing()
    assert timing.step_seconds == pytest.approx(0.3) and timing.eval_seconds == pytest.approx(0.5)
    assert guard.work_to_next_rung(30)[1] == pytest.approx(60 * timing.step_seconds + 6 * timing.eval_seconds)
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
    assert pickle.loads(pickle.dumps(live)).tracker is None


def test_a_resumed_sweeps_guard_commits_trials_at_what_its_earlier_driver_measured():
    """Tune saves the guard without its live forecast; `sweep resume` restores it with none.
    Its commitments go on at the figures measured before the save, not the calibration."""
    import pickle

    plan, forecast = plan_and_forecast()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6))
    guard = BudgetGuard(BudgetSpec(max_usd=1.0), book, Rate("cpu", 1, 3.6), TIMING, [10, 30, 90], 10, 10, live=live)
    # Steps at three times the calibration.
    live.measured = Measured(steps=1000, train_seconds=300.0, evaluations=100, eval_seconds=50.0)
    measured = guard.commit_timing()
    assert measured.step_seconds > 2 * TIMING.step_seconds

    restored = pickle.loads(pickle.dumps(guard))
    assert restored.live is None
    assert restored.commit_timing() == measured
    assert restored.work_to_next_rung(0, start=True)[1] == pytest.approx(guard.work_to_next_rung(0, start=True)[1])


# ------------------------------------------------------------ the terminal and the report


def test_the_live_table_shows_the_eta_under_the_table_and_prints_it_to_a_pipe():
    import io

    from rich.console import Console

    from sweeper.track._console import LiveTable

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
    uncapped = estimate(plan, forecast, Measured(), [TrialAt(10, True)], spent=spent()).left
    usd_cap = uncapped.usd / 4
    capped_plan, capped_forecast = plan_and_forecast(budget={"max_usd": usd_cap, "max_steps": 10_000})
    half = usd_cap / 2  # half the cap used: an eighth of the uncapped rest fits
    left = estimate(capped_plan, capped_forecast, Measured(), [TrialAt(10, True)], spent=spent(usd=half)).left
    assert left.usd == pytest.approx(usd_cap - half)
    # That work runs on the 2 slots, full until the cap: its trials' time over 2.
    assert left.wall_seconds == pytest.approx(uncapped.trial_seconds / 8 / 2)
    assert left.steps == round(uncapped.steps / 8)
    # The step cap binds first once fewer steps are left under it than the dollars allow.
    left = estimate(capped_plan, capped_forecast, Measured(), [TrialAt(10, True)], spent=spent(usd=half, steps=9_990)).left
    assert left.steps == 10 and left.usd == pytest.approx(uncapped.usd * 10 / uncapped.steps)
    crossed = estimate(capped_plan, capped_forecast, Measured(), [TrialAt(10, True)], spent=spent(usd=2 * usd_cap)).left
    assert crossed.wall_seconds == 0 and crossed.usd == 0
    # A wall-hours cap that binds leaves exactly what it has left.
    hours_plan, hours_forecast = plan_and_forecast(budget={"max_hours": uncapped.wall_seconds / 2 / 3600})
    by_hours = estimate(hours_plan, hours_forecast, Measured(), [TrialAt(10, True)], spent=spent(elapsed=10.0)).left
    assert by_hours.wall_seconds == pytest.approx(uncapped.wall_seconds / 2 - 10.0)
    loose_plan, loose_forecast = plan_and_forecast(budget={"max_usd": 100 * uncapped.usd})
    assert estimate(loose_plan, loose_forecast, Measured(), [TrialAt(10, True)]).left == uncapped


def test_the_forecast_before_launch_stops_at_the_cap_as_the_live_estimate_does():
    """A sweep of search.num_trials capped below its expected cost: the forecast printed
    before launch is the live estimate with nothing started (cut at the cap), and the
    budget's line still says the cap cuts the whole sweep."""
    from sweeper.plan._caps import budget_lines

    plan, forecast = plan_and_forecast()
    usd_cap = forecast.expected.usd / 2
    capped_plan, capped = plan_and_forecast(budget={"max_usd": usd_cap})
    assert capped.cut_by == "max_usd" and capped.uncapped == forecast.expected
    assert capped.expected.usd == pytest.approx(usd_cap)
    assert capped.expected.wall_seconds == pytest.approx(forecast.expected.trial_seconds / 2 / 2)  # on 2 full slots
    assert estimate(capped_plan, capped, Measured(), []).left == capped.expected
    lines = forecast_lines(capped, "CPU core-hours")
    assert any(line.startswith("Expected (budget.max_usd stops it at about 50% of all its trials' expected work)")
               for line in lines), lines
    (cap_line,) = budget_lines(capped_plan.spec.budget, capped)
    assert f"against {forecast.expected.usd:.4g} expected" in cap_line and cap_line.endswith("expected to be cut by it")
    # A cap the sweep stays under changes nothing.
    _, loose = plan_and_forecast(budget={"max_usd": 10 * forecast.expected.usd})
    assert loose.expected == loose.uncapped == forecast.expected and loose.cut_by is None


def test_a_trial_that_reports_its_train_seconds_and_no_tokens_is_measured_too():
    """trl's ORPO and CPO trainers count no tokens; their reports carry train_seconds."""
    plan, forecast = plan_and_forecast()
    clock = Clock()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast, book, Rate("cpu", 1, 3.6), Logged(), Shown(), clock)
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    for step in (10, 20):
        clock.now += 4.0
        record.history.append({"step": step, "train_seconds": 2.0, "eval_loss": 1.0})
        live.trial_result(record)
    assert live.measured.steps == 20 and live.measured.train_seconds == pytest.approx(4.0)
