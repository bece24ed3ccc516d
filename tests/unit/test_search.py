"""The searcher tells Optuna the truth: stopped trials are PRUNED, failures FAIL."""

import optuna
from optuna.trial import TrialState

from sweeper.search import StepAwareOptunaSearch
from sweeper.space import to_optuna_distributions
from sweeper.spec import validate_spec
from tests.conftest import REPO, small_sweep


def make_search():
    spec = validate_spec(small_sweep("x"), base_dir=REPO)
    return StepAwareOptunaSearch(
        space=to_optuna_distributions(spec), metric="eval_loss", mode="min",
        sampler=optuna.samplers.RandomSampler(seed=0), max_steps=30,
    )


def test_stopped_trial_is_pruned_with_values_at_training_steps():
    search = make_search()
    search.suggest("a")
    search.on_trial_result("a", {"step": 10, "eval_loss": 3.0, "training_iteration": 1})
    search.on_trial_complete("a", {"step": 10, "eval_loss": 3.0})
    (trial,) = search._ot_study.get_trials()
    assert trial.state == TrialState.PRUNED
    assert trial.intermediate_values == {10: 3.0}


def test_full_length_trial_is_complete_and_failure_is_fail():
    search = make_search()
    search.suggest("a")
    search.suggest("b")
    for step in (10, 20, 30):
        search.on_trial_result("a", {"step": step, "eval_loss": 4.0 - step / 10})
    search.on_trial_complete("a", {"step": 30, "eval_loss": 1.0})
    search.on_trial_complete("b", None, error=True)
    a, b = search._ot_study.get_trials()
    assert (a.state, a.value) == (TrialState.COMPLETE, 1.0)
    assert b.state == TrialState.FAIL


def test_nan_metric_fails_the_trial():
    search = make_search()
    search.suggest("a")
    search.on_trial_result("a", {"step": 10, "eval_loss": float("nan")})
    search.on_trial_complete("a", {"step": 30, "eval_loss": float("nan")})
    assert search._ot_study.get_trials()[0].state == TrialState.FAIL


def test_a_trial_told_before_is_not_told_again():
    """Tune reports trials it stops at a sweep stop; resumed, they finish later."""
    search = make_search()
    search.suggest("a")
    search.on_trial_result("a", {"step": 10, "eval_loss": 3.0})
    search.on_trial_complete("a", {"step": 10, "eval_loss": 3.0})
    search._completed_trials.clear()  # as after a resume: a restored searcher, same study
    search.on_trial_complete("a", {"step": 30, "eval_loss": 2.0})
    assert search._ot_study.get_trials()[0].state == TrialState.PRUNED


def test_a_trial_optuna_has_finished_is_not_reported_to_again():
    """A driver killed after telling Optuna and before Tune saved the searcher: resumed,
    the trial reports again, which Optuna refuses for a finished trial."""
    search = make_search()
    search.suggest("a")
    search.on_trial_result("a", {"step": 10, "eval_loss": 3.0})
    search.on_trial_complete("a", {"step": 10, "eval_loss": 3.0})
    search._completed_trials.clear()  # the searcher's state as saved before the tell
    search.on_trial_result("a", {"step": 20, "eval_loss": 2.5})
    assert search._ot_study.get_trials()[0].intermediate_values == {10: 3.0}
