import time

import pytest
from ray.tune.search import Searcher

from sweeper.run.budget_guard import BudgetGuard, BudgetSearcher, BudgetStopper
from sweeper.spec.budget import BudgetSpec
from sweeper.errors import UserError
from sweeper.cost.throughput import TrialTiming
from sweeper.names import TrialState
from sweeper.track.book import SweepBook, TrialRecord
from sweeper.cost.prices import Rate
from sweeper.plan.checks import check_spec
from sweeper.spec.load import validate_spec
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
    guard without a book); SweepBudget.reattach gives them the resumed book, so the caps
    count what the first driver's trials spent."""
    import pickle

    from sweeper.run.budget import SweepBudget

    inner = Counting()
    guard = guard_with(book_with(), max_usd=0.05)
    searcher, stopper = pickle.loads(pickle.dumps((BudgetSearcher(inner, guard), BudgetStopper(guard))))
    resumed_book = book_with(running_trial(1, 30, 20), running_trial(2, 25, 10))  # $0.055 spent
    budget = SweepBudget(spec=None, plan=None, forecast=None, guard=None)

    unwrapped = budget.reattach(searcher, stopper, resumed_book)

    assert isinstance(unwrapped, Counting)  # the sweep's own searcher, for rebuild_for_resume
    assert budget.guard is stopper.guard is searcher.guard and budget.guard.book is resumed_book
    assert stopper.stop_all() and budget.cut()
    assert searcher.suggest("c") == Searcher.FINISHED  # a cap reached


def test_a_resumed_sweep_without_a_budget_keeps_its_searcher():
    from sweeper.run.budget import SweepBudget

    inner = Counting()
    budget = SweepBudget(spec=None, plan=None, forecast=None, guard=None)
    assert budget.reattach(inner, None, book_with()) is inner and budget.guard is None and not budget.cut()


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
