import time

import pytest
from ray.tune.search import Searcher

from sweeper.budget._guard import BudgetGuard, BudgetSearcher, BudgetStopper
from sweeper.spec._sections import BudgetSpec
from sweeper.errors import UserError
from sweeper.cost._throughput import TrialTiming
from sweeper.names import TrialState
from sweeper.track._book import SweepBook, TrialRecord
from sweeper.cost._prices import Rate
from sweeper.plan._checks import check_spec
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep

# 1 core-hour costs $3.6, so one core-second costs $0.001.
PRICE = {"usd_per_hour": 3.6}
TIMING = TrialTiming(step_seconds=0.1, eval_seconds=0.5, setup_seconds=1.0, source="test")


def validate(**sections):
    return validate_spec(small_sweep("b", **sections), base_dir=REPO)


def test_a_cap_below_one_trials_cost_is_a_keyed_error_at_validate_time():
    """The schema takes the caps; the checks after it (sweep validate, plan, start) find
    that none pays for one trial."""
    spec = validate(cost=PRICE, budget={"max_usd": 1e-6, "max_hours": 1e-7, "max_accelerator_hours": 1e-9})
    with pytest.raises(UserError) as raised:
        check_spec(spec)
    lines = raised.value.lines
    assert [line.split(":")[0] for line in lines] == ["budget.max_usd", "budget.max_hours", "budget.max_accelerator_hours"]
    assert "got 1e-06" in lines[0] and "raise it or leave it out" in lines[0]


def test_caps_that_fit_a_trial_validate_and_unknown_keys_are_named():
    spec = validate(cost=PRICE, budget={"max_usd": 5, "max_hours": 1})
    check_spec(spec)
    assert spec.budget.max_usd == 5 and spec.budget.max_accelerator_hours is None
    with pytest.raises(UserError) as raised:
        validate(budget={"max_usdollars": 5})
    assert raised.value.lines[0].startswith("budget.max_usdollars: unknown key; did you mean 'max_usd'?")
    with pytest.raises(UserError, match="budget.max_usd"):
        validate(budget={"max_usd": -1})


def guard_with(book: SweepBook, **caps) -> BudgetGuard:
    return BudgetGuard(
        budget=BudgetSpec(**caps),
        book=book,
        rate=Rate("cpu", accelerators_per_trial=1, usd_per_hour=3.6),
        timing=TIMING,
        milestones=[10, 30, 90],
        eval_every=10,
        num_trials=10,
    )


def running_trial(number: int, seconds: float, step: int) -> TrialRecord:
    record = TrialRecord(trial_id=f"t{number}", number=number, params={}, started_at=time.time() - seconds)
    record.history.append({"step": step})
    return record


def book_with(*records: TrialRecord) -> SweepBook:
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    book.trials = {r.trial_id: r for r in records}
    return book


def test_a_cap_reached_stops_all_trials_and_names_what_it_cut():
    book = book_with(running_trial(1, 30, 20), running_trial(2, 25, 10))
    guard = guard_with(book, max_usd=0.05)  # $0.055 spent
    stopper = BudgetStopper(guard)
    assert stopper.stop_all()
    assert guard.reached_cap == "max_usd" and guard.stopped_trials == [1, 2]
    assert "budget.max_usd (0.05 USD) reached" in guard.summary() and "(1, 2)" in guard.summary()
    tags, metrics = guard.as_tags_and_metrics()
    assert tags["sweeper.budget_stop"] == "max_usd"
    assert metrics["budget_trials_stopped"] == 2 and metrics["budget_trials_not_started"] == 8


def test_below_the_cap_nothing_stops():
    guard = guard_with(book_with(running_trial(1, 5, 10)), max_usd=1.0, max_hours=1.0)
    assert not BudgetStopper(guard).stop_all()
    assert guard.summary() is None
    assert guard.as_tags_and_metrics()[0] == {"sweeper.budget_stop": "none"}


class Counting(Searcher):
    def __init__(self):
        super().__init__(metric="eval_loss", mode="min")
        self.asked = 0

    def suggest(self, trial_id):
        self.asked += 1
        return {"x": self.asked}

    def on_trial_complete(self, trial_id, result=None, error=False):
        pass


def test_no_trial_starts_once_committed_work_would_cross_a_cap():
    # Spent: 10 s ($0.010). Committed: the running trial to step 30 (2 s + 2 evals = 3 s)
    # and a new trial's first rung (1 + 1 + 0.5 = 2.5 s): $0.0155 in all.
    book = book_with(running_trial(1, 10, 10))
    inner = Counting()
    roomy = BudgetSearcher(inner, guard_with(book, max_usd=0.016))
    assert roomy.suggest("a") == {"x": 1}
    tight_guard = guard_with(book, max_usd=0.015)
    tight = BudgetSearcher(inner, tight_guard)
    # Held back while the trial runs (pruned, it would free its commitment): not FINISHED,
    # which Tune would never ask past.
    assert tight.suggest("b") is None
    assert inner.asked == 1  # the wrapped searcher was not asked
    assert tight_guard.held_back_by == "max_usd" and "8 of 10 trials not started" not in (tight_guard.summary() or "")
    assert "9 of 10 trials not started" in tight_guard.summary()


def test_a_running_trial_that_has_not_reported_yet_commits_its_start_too():
    # Spent $0.010 by a paused trial. A trial in the book that has not reported is still
    # starting: its first rung with its start (2.5 s, $0.0025) is committed, as is the new
    # trial's ($0.015 in all; its first rung alone, $0.014).
    book = book_with(running_trial(1, 10, 10))
    book.trials["t1"].state = TrialState.PAUSED
    starting = TrialRecord(trial_id="t2", number=2, params={})
    book.trials["t2"] = starting
    assert guard_with(book, max_usd=0.0145).new_trial_would_cross() == "max_usd"
    starting.history.append({"step": 10})  # reported: on to step 30 (2 s + 2 evaluations = 3 s)
    starting.started_at = time.time()
    assert guard_with(book, max_usd=0.0165).new_trial_would_cross() is None


def test_a_trial_that_starts_a_new_trial_process_commits_that_process_start_too():
    """One-worker trials run in processes Tune reuses, one per slot: this driver's first
    trials each start one (5 s here), the later ones do not."""
    from dataclasses import replace

    book = book_with()
    guard = replace(guard_with(book, max_usd=1.0), slots=2, timing=replace(TIMING, process_start_seconds=5.0))
    first_rung = 1.0 + 10 * 0.1 + 0.5  # start, steps to step 10, an evaluation
    assert guard.work_to_next_rung(0, start=True, new_process=guard.starts_a_new_process()) == (10, first_rung + 5.0)
    book.trials["t1"] = TrialRecord(trial_id="t1", number=1, params={})  # started by this driver
    assert guard.starts_a_new_process()
    book.trials["t2"] = TrialRecord(trial_id="t2", number=2, params={})
    assert not guard.starts_a_new_process()  # both slots have their process: the next reuses one
    assert guard.work_to_next_rung(0, start=True, new_process=guard.starts_a_new_process()) == (10, first_rung)


def test_with_no_trial_running_a_held_back_search_is_finished():
    # Spent $0.010 by a trial now paused at a rung; a new trial's first rung: $0.0025.
    book = book_with(running_trial(1, 10, 10))
    book.trials["t1"].state = TrialState.PAUSED
    inner = Counting()
    assert BudgetSearcher(inner, guard_with(book, max_usd=0.012)).suggest("a") == Searcher.FINISHED
    assert inner.asked == 0


def test_a_held_back_trial_starts_once_a_running_trial_is_pruned():
    # Two trials running to step 30 commit 6 s; pruned, one of them commits nothing more.
    book = book_with(running_trial(1, 10, 10), running_trial(2, 10, 10))
    searcher = BudgetSearcher(Counting(), guard_with(book, max_usd=0.027))  # $0.020 spent
    assert searcher.suggest("a") is None
    book.trials["t2"].state = TrialState.PRUNED
    assert searcher.suggest("b") == {"x": 1}


def test_a_trial_goes_on_from_a_rung_only_if_its_work_to_the_next_rung_fits_under_the_cap():
    # Spent: 20 s ($0.020). Trial 1 reports step 30, a rung: going on to 90 is 60 steps and
    # 6 evaluations (9 s); trial 2, at rung 10, is committed to step 30 (3 s): $0.032 in all.
    book = book_with(running_trial(1, 10, 20), running_trial(2, 10, 10))
    assert not BudgetStopper(guard_with(book, max_usd=0.0325))("t1", {"step": 30})
    guard = guard_with(book, max_usd=0.0315)
    stopper = BudgetStopper(guard)
    assert not stopper("t1", {"step": 20}) and not stopper("t1", {"step": 90})  # no rung: judged before
    assert stopper("t1", {"step": 30}) and not stopper.stop_all()
    assert guard.held_at_rung == (1,) and guard.cut() and guard.ending_cap() == "max_usd"
    assert "budget.max_usd: trials 1 stopped at a rung (going on to the next would have crossed the cap)" in guard.summary()
    # A step cap counts the steps of the report at hand too (the book has the one before).
    steps = guard_with(book, max_steps=20 + 10 + 60 + 20 + 10 - 1)
    assert BudgetStopper(steps)("t1", {"step": 30}) and steps.held_at_rung_by == "max_steps"
    assert not BudgetStopper(guard_with(book, max_steps=20 + 10 + 60 + 20 + 10))("t1", {"step": 30})


def test_searcher_wrapper_exposes_the_wrapped_one_for_tune():
    from ray.tune.search import ConcurrencyLimiter

    limiter = ConcurrencyLimiter(Counting(), max_concurrent=2)
    wrapped = BudgetSearcher(limiter, guard_with(book_with(), max_usd=1.0))
    assert wrapped.searcher is limiter and wrapped.metric == "eval_loss"


def test_a_restored_guard_without_its_book_cuts_nothing():
    import pickle

    guard = pickle.loads(pickle.dumps(guard_with(book_with(running_trial(1, 100, 10)), max_usd=0.001)))
    assert guard.book is None and guard.reached() is None and guard.new_trial_would_cross() is None


def test_a_resumed_sweep_measures_its_restored_guard_on_the_new_book():
    """`sweep resume`: Tune restores the searcher and the stopper pickled at the start (their
    guard without a book); SweepBudget.guarded gives them the resumed book, so the caps
    count what the first driver's trials spent."""
    import pickle

    from sweeper.budget._sweep_budget import SweepBudget

    inner = Counting()
    guard = guard_with(book_with(), max_usd=0.05)
    searcher, stopper = pickle.loads(pickle.dumps((BudgetSearcher(inner, guard), BudgetStopper(guard))))
    resumed_book = book_with(running_trial(1, 30, 20), running_trial(2, 25, 10))  # $0.055 spent
    budget = SweepBudget()

    guarded, kept = budget.guarded(searcher, stopper, resumed_book)

    assert guarded is searcher and kept is stopper and isinstance(guarded.searcher, Counting)  # as Tune restored them
    assert budget.guard is stopper.guard is searcher.guard and budget.guard.book is resumed_book
    assert stopper.stop_all() and budget.cut()
    assert searcher.suggest("c") == Searcher.FINISHED  # a cap reached


def test_a_resumed_sweep_without_a_budget_keeps_its_searcher():
    from sweeper.budget._sweep_budget import SweepBudget

    inner = Counting()
    budget = SweepBudget()
    assert budget.guarded(inner, None, book_with()) == (inner, None) and budget.guard is None and not budget.cut()


def test_trials_suggested_in_one_loop_step_count_before_they_start():
    # Spent $0.010 by a paused trial; each new trial's first rung commits $0.0025.
    book = book_with(running_trial(1, 10, 10))
    book.trials["t1"].state = TrialState.PAUSED
    searcher = BudgetSearcher(Counting(), guard_with(book, max_usd=0.0135))
    assert searcher.suggest("a") == {"x": 1}
    assert searcher.suggest("b") is None  # "a" has not started yet, but it will spend
    book.trials["a"] = running_trial(2, 0, 0)
    book.trials["a"].trial_id = "a"
    assert searcher.guard.starting() == []


# ------------------------------------------------------------ trials until a budget cap


def open_ended(**sections) -> dict:
    """small_sweep without search.num_trials."""
    raw = small_sweep("b", **sections)
    del raw["search"]["num_trials"]
    return raw


def test_without_num_trials_or_a_cap_sweep_validate_says_so_in_one_keyed_line(tmp_path):
    from typer.testing import CliRunner

    from sweeper.cli import app
    from tests.conftest import write_yaml

    for budget in (None, {}):  # no section, or one without a cap
        raw = open_ended() if budget is None else open_ended(budget=budget)
        result = CliRunner().invoke(app, ["validate", str(write_yaml(tmp_path / "s.yaml", raw))])
        assert result.exit_code == 2, result.output
        lines = [line.removeprefix("error: ") for line in result.output.splitlines() if "search." in line]
        assert len(lines) == 1 and lines[0].startswith("search.num_trials: not given, and no budget cap")
        assert "give a trial count or a budget cap" in lines[0]


def test_a_cap_makes_num_trials_optional_and_max_steps_is_a_cap():
    for cap in ({"max_steps": 200}, {"max_usd": 5}, {"max_hours": 1}, {"max_accelerator_hours": 2}):
        spec = validate_spec(open_ended(cost=PRICE, budget=cap), base_dir=REPO)
        check_spec(spec)
        assert spec.search.num_trials is None and spec.budget.caps() == cap
    # A trial count and a cap: the cap only cuts the sweep short, as before.
    assert validate(budget={"max_steps": 200}).search.num_trials == 4
    with pytest.raises(UserError, match="budget.max_steps"):
        validate(budget={"max_steps": 0})


def test_a_step_cap_below_one_first_rung_is_a_keyed_error():
    spec = validate_spec(open_ended(budget={"max_steps": 9}), base_dir=REPO)  # first rung: step 10
    with pytest.raises(UserError) as raised:
        check_spec(spec)
    assert raised.value.lines == [
        "budget.max_steps: one trial trains 10 steps to its first rung (training.max_steps without early "
        "stopping), got 9; raise it or leave it out"
    ]


def test_nothing_to_search_runs_once_not_until_the_cap():
    raw = open_ended(budget={"max_steps": 200})
    raw["search"]["parameters"] = {}
    with pytest.raises(UserError) as raised:
        validate_spec(raw, base_dir=REPO)
    assert raised.value.lines[0].startswith("search.num_trials: nothing to search")


def test_a_grid_until_a_cap_runs_at_most_the_grid():
    from sweeper.spec._schema import most_trials, trials_text

    grid = {"training.learning_rate": {"distribution": "categorical", "values": [1e-3, 1e-2, 3e-2]}}
    spec = validate_spec(open_ended(search={"method": "grid", "parameters": grid}, budget={"max_steps": 200}), base_dir=REPO)
    assert most_trials(spec) == 3
    assert trials_text(spec) == "trials until budget.max_steps: 200 (at most the grid's 3)"
    spec = validate_spec(open_ended(budget={"max_steps": 200, "max_usd": 2}), base_dir=REPO)
    assert most_trials(spec) is None and trials_text(spec) == "trials until budget.max_usd: 2, budget.max_steps: 200"


def test_a_step_cap_counts_the_trials_reported_steps_and_names_what_it_ended():
    book = book_with(running_trial(1, 30, 20), running_trial(2, 25, 10))
    guard = guard_with(book, max_steps=30)
    assert BudgetStopper(guard).stop_all() and guard.reached_cap == "max_steps"
    assert guard.summary() == (
        "budget.max_steps (30 training steps) reached at 30: stopped the running trials (1, 2); "
        "the sweep ran 2 trials, 30 training steps"
    )
    assert not BudgetStopper(guard_with(book, max_steps=31)).stop_all()


def test_no_trial_starts_once_committed_steps_would_cross_a_step_cap():
    # Spent 10 steps; committed: the running trial to its next rung (20) and a new first rung (10).
    book = book_with(running_trial(1, 10, 10))
    assert BudgetSearcher(Counting(), guard_with(book, max_steps=40)).suggest("a") == {"x": 1}
    held = guard_with(book, max_steps=39)
    assert BudgetSearcher(Counting(), held).suggest("b") is None and held.held_back_by == "max_steps"


def test_an_open_ended_search_ends_at_its_cap_and_the_summary_says_how():
    book = book_with(running_trial(1, 10, 30), running_trial(2, 10, 10))
    book.trials["t1"].state, book.trials["t2"].state = TrialState.COMPLETED, TrialState.PRUNED
    guard = guard_with(book, max_steps=45)
    guard.num_trials = None
    assert not guard.cut()  # nothing ended it yet: a stopped open-ended sweep is interrupted
    assert BudgetSearcher(Counting(), guard).suggest("c") == Searcher.FINISHED  # 40 + a first rung of 10
    assert guard.cut() and guard.ending_cap() == "max_steps" and guard.not_started() == 0
    assert guard.summary() == (
        "budget.max_steps (45 training steps): no more trials started (one more trial's first rung would have "
        "crossed the cap); the sweep ran 2 trials, 40 training steps"
    )
    tags, metrics = guard.as_tags_and_metrics()
    assert tags["sweeper.budget_stop"] == "max_steps" and metrics["budget_max_steps"] == 45
    assert metrics["budget_trials_not_started"] == 0


def test_the_cap_line_the_notifications_quote_comes_once_a_cap_stopped_or_cut_the_sweep():
    from sweeper.budget import SweepBudget

    assert SweepBudget().cap_line(ended=True) is None  # no budget
    held = guard_with(book_with(running_trial(1, 10, 10)), max_usd=0.015)
    BudgetSearcher(Counting(), held).suggest("b")  # held back while a trial runs: it may yet start
    assert SweepBudget(guard=held).cap_line(ended=False) is None
    assert "9 of 10 trials not started" in SweepBudget(guard=held).cap_line(ended=True)
    reached = guard_with(book_with(running_trial(1, 30, 20)), max_usd=0.01)
    BudgetStopper(reached).stop_all()
    assert SweepBudget(guard=reached).cap_line(ended=False) == reached.summary()
    assert "budget.max_usd (0.01 USD) reached" in reached.summary()
