"""The searcher tells Optuna the truth: every evaluation is an intermediate value at its
training step, stopped trials are PRUNED, failures FAIL; read back with optuna.load_study."""

import pickle
import shutil

import optuna
from optuna.trial import TrialState

from sweeper.search._searcher import StepAwareOptunaSearch, optuna_searcher
from sweeper.search._space import to_optuna_distributions
from sweeper.search._study import REPEAT_ATTR, STARTUP_ATTR, TUNE_TRIAL_ID_ATTR, WARM_START_ATTR, study_url
from sweeper.search._warm_start import WarmStart
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep


def make_search(tmp_path, **settings):
    spec = validate_spec(small_sweep("x"), base_dir=REPO)
    return StepAwareOptunaSearch(
        space=to_optuna_distributions(spec), metric="eval_loss", mode="min",
        sampler=optuna.samplers.RandomSampler(seed=0), max_steps=30,
        study_name="x", storage_url=study_url(tmp_path), **settings,
    )


def study_trials(tmp_path):
    return optuna.load_study(study_name="x", storage=study_url(tmp_path)).get_trials()


def test_stopped_trial_is_pruned_with_values_at_training_steps(tmp_path):
    search = make_search(tmp_path)
    search.suggest("a")
    search.on_trial_result("a", {"step": 10, "eval_loss": 3.0, "training_iteration": 1})
    search.on_trial_complete("a", {"step": 20, "eval_loss": 2.8, "training_iteration": 2})
    (trial,) = study_trials(tmp_path)
    assert trial.state == TrialState.PRUNED
    assert trial.intermediate_values == {10: 3.0, 20: 2.8}
    assert trial.user_attrs[TUNE_TRIAL_ID_ATTR] == "a"


def test_a_trial_stopped_on_its_first_evaluation_keeps_that_value(tmp_path):
    """Tune hands the result a trial is stopped on only to on_trial_complete."""
    search = make_search(tmp_path)
    search.suggest("a")
    search.on_trial_complete("a", {"step": 10, "eval_loss": 6.5})
    (trial,) = study_trials(tmp_path)
    assert (trial.state, trial.intermediate_values) == (TrialState.PRUNED, {10: 6.5})


def test_full_length_trial_is_complete_and_failure_is_fail(tmp_path):
    search = make_search(tmp_path)
    config = search.suggest("a")
    search.suggest("b")
    for step in (10, 20, 30):
        search.on_trial_result("a", {"step": step, "eval_loss": 4.0 - step / 10})
    search.on_trial_complete("a", {"step": 30, "eval_loss": 1.0})
    search.on_trial_complete("b", None, error=True)
    a, b = study_trials(tmp_path)
    assert (a.state, a.value, a.params) == (TrialState.COMPLETE, 1.0, config)
    assert a.intermediate_values == {10: 3.0, 20: 2.0, 30: 1.0}
    assert b.state == TrialState.FAIL


def test_nan_metric_fails_the_trial(tmp_path):
    search = make_search(tmp_path)
    search.suggest("a")
    search.on_trial_result("a", {"step": 10, "eval_loss": float("nan")})
    search.on_trial_complete("a", {"step": 30, "eval_loss": float("nan")})
    assert study_trials(tmp_path)[0].state == TrialState.FAIL


def test_the_first_startup_trials_are_unranked_and_a_restored_searcher_knows_them(tmp_path):
    """early_stopping.startup_trials: the first N trials the searcher suggests are the ones
    ASHA by promotion lets train to max_steps; kept in the study for `sweep resume`."""
    search = make_search(tmp_path, startup_trials=2)
    for trial_id in ("t0", "t1", "t2"):
        search.suggest(trial_id)
    assert search.unranked == {"t0", "t1"}
    assert make_search(tmp_path, startup_trials=2).unranked == {"t0", "t1"}
    restored = make_search(tmp_path, startup_trials=2)
    restored.suggest("t3")  # later trials climb the rungs
    assert restored.unranked == {"t0", "t1"}



def test_the_marks_the_searcher_hands_out_are_those_it_wrote_to_the_study_also_after_a_restore(tmp_path):
    """The driver reads each trial's marks from the searcher's memory; the study is their
    durable copy, from which a searcher restored by `sweep resume` has them again."""
    seed = WarmStart(
        first_configs=[({"training.learning_rate": 1e-3}, "earlier/t1"), ({"training.learning_rate": 2e-3}, "earlier/t2")],
        repeats={"earlier/t1"},
    )
    search = make_search(tmp_path, startup_trials=1, warm_start=seed)
    for trial_id in "abc":
        search.suggest(trial_id)
    search.on_trial_complete("a", {"step": 30, "eval_loss": 1.0})

    def in_study():
        return {t.user_attrs[TUNE_TRIAL_ID_ATTR]: t.user_attrs for t in study_trials(tmp_path) if t.user_attrs}

    written = in_study()
    assert written == {
        "a": {TUNE_TRIAL_ID_ATTR: "a", WARM_START_ATTR: "earlier/t1", REPEAT_ATTR: True},
        "b": {TUNE_TRIAL_ID_ATTR: "b", WARM_START_ATTR: "earlier/t2", STARTUP_ATTR: True},
        "c": {TUNE_TRIAL_ID_ATTR: "c"},
    }
    assert {trial_id: search.marks(trial_id) for trial_id in "abc"} == written
    assert search.marks("never asked") == {}

    # As `sweep resume` restores it: unpickled (the marks are not in the pickle), pointed
    # at the sweep's study, then given its saved sampler.
    pickled = pickle.dumps(search)
    assert b"earlier/t1" not in pickled
    search.save(str(tmp_path / "searcher.pkl"))
    restored = pickle.loads(pickled)
    restored.use_study(study_url(tmp_path))
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert {trial_id: restored.marks(trial_id) for trial_id in "abc"} == written
    assert restored.unranked == {"a", "b"}
    restored.suggest("d")  # the one startup trial was b
    assert restored.marks("d") == in_study()["d"] == {TUNE_TRIAL_ID_ATTR: "d"}


def test_the_sweeps_searcher_is_found_inside_its_wrappers(tmp_path):
    """The driver takes its marks from the sweep's searcher, which the slot limiter and the
    budget's searcher wrap."""
    from types import SimpleNamespace

    from sweeper.budget._guard import BudgetSearcher
    from sweeper.search._asha import SlotLimiter

    search = make_search(tmp_path)
    assert optuna_searcher(BudgetSearcher(SlotLimiter(search, SimpleNamespace(slots=2)), guard=None)) is search
    assert optuna_searcher(search) is search
    assert optuna_searcher(None) is None

def test_a_restored_searcher_maps_tune_trials_to_the_study(tmp_path):
    """Resumed, Tune restores the searcher pickled with the tuner plus its saved state:
    trials asked before go on reporting to their Optuna trials."""
    search = make_search(tmp_path)
    search.suggest("a")
    search.on_trial_result("a", {"step": 10, "eval_loss": 3.0})
    restored = pickle.loads(pickle.dumps(search))
    search.save(str(tmp_path / "searcher.pkl"))
    restored.restore(str(tmp_path / "searcher.pkl"))
    restored.on_trial_result("a", {"step": 10, "eval_loss": 3.0})  # continued from its checkpoint
    restored.on_trial_result("a", {"step": 20, "eval_loss": 2.5})
    restored.on_trial_complete("a", {"step": 30, "eval_loss": 2.0})
    restored.suggest("b")
    a, b = study_trials(tmp_path)
    assert (a.state, a.intermediate_values) == (TrialState.COMPLETE, {10: 3.0, 20: 2.5, 30: 2.0})
    assert b.user_attrs[TUNE_TRIAL_ID_ATTR] == "b"


def test_a_trial_optuna_has_finished_is_not_reported_to_or_told_again(tmp_path):
    """A driver killed after telling Optuna and before Tune saved its state: resumed, the
    trial reports and ends again, which Optuna would refuse for a finished trial."""
    search = make_search(tmp_path)
    search.suggest("a")
    search.on_trial_complete("a", {"step": 10, "eval_loss": 3.0})
    restored = pickle.loads(pickle.dumps(search))
    restored.on_trial_result("a", {"step": 20, "eval_loss": 2.5})
    restored.on_trial_complete("a", {"step": 30, "eval_loss": 2.0})
    (trial,) = study_trials(tmp_path)
    assert (trial.state, trial.intermediate_values) == (TrialState.PRUNED, {10: 3.0})


def test_a_trial_asked_by_a_driver_killed_before_it_was_named_fails_when_the_sweep_resumes(tmp_path):
    """kill -9 between Optuna's ask and the trial's Tune id being written: the study holds
    a RUNNING trial no Tune trial will report to. The resumed searcher ends it as FAIL and
    goes on asking."""
    search = make_search(tmp_path)
    search.suggest("a")
    search.study.ask()  # the killed driver's last ask
    restored = pickle.loads(pickle.dumps(search))
    restored.suggest("b")
    a, orphan, b = study_trials(tmp_path)
    assert orphan.state == TrialState.FAIL and TUNE_TRIAL_ID_ATTR not in orphan.user_attrs
    assert a.state == b.state == TrialState.RUNNING
    assert [a.user_attrs[TUNE_TRIAL_ID_ATTR], b.user_attrs[TUNE_TRIAL_ID_ATTR]] == ["a", "b"]


def test_resume_tells_optuna_what_mlflow_recorded_after_the_last_tell(tmp_path):
    """The last driver died after MLflow recorded a trial's reports or end and before Optuna
    heard of them: reconciled against the book, the study gets its reports and its end."""
    from sweeper.track._book import SweepBook, TrialRecord

    search = make_search(tmp_path)
    for trial_id in ("a", "b", "c"):
        search.suggest(trial_id)
    search.on_trial_result("a", {"step": 10, "eval_loss": 3.0})
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    history = [{"step": 10, "eval_loss": 3.0}, {"step": 20, "eval_loss": 2.9}]
    book.trials = {
        "a": TrialRecord("a", 1, {}, state="pruned", history=history),
        "b": TrialRecord("b", 2, {}, state="stopped", history=history[:1]),  # continues
        "c": TrialRecord("c", 3, {}, state="failed"),
    }
    pickle.loads(pickle.dumps(search)).reconcile(book)
    a, b, c = study_trials(tmp_path)
    assert (a.state, a.intermediate_values) == (TrialState.PRUNED, {10: 3.0, 20: 2.9})
    assert (b.state, c.state) == (TrialState.RUNNING, TrialState.FAIL)
    # b goes on from its checkpoint past step 10, which MLflow recorded just before the
    # loss: the study has it now (else a trial pruned at its first rung would have no
    # intermediate value in the study, only its value in MLflow).
    assert b.intermediate_values == {10: 3.0}


def test_each_tune_checkpoint_holds_a_copy_of_the_study_that_a_moved_sweep_continues(tmp_path):
    """Tune uploads its experiment folder to storage.uri: the copy of the study that
    `save_to_dir` leaves there lets a sweep whose folder is gone resume from storage."""
    first, checkpoint, moved = tmp_path / "first", tmp_path / "tune", tmp_path / "elsewhere"
    for folder in (first, checkpoint, moved):
        folder.mkdir()
    search = make_search(first)
    search.suggest("a")
    search.on_trial_complete("a", {"step": 30, "eval_loss": 1.0})
    search.suggest("b")
    search.on_trial_result("b", {"step": 10, "eval_loss": 3.0})
    search.save_to_dir(str(checkpoint))
    assert [p.name for p in checkpoint.iterdir() if p.name.startswith("searcher-state")]  # Tune's own file too
    (checkpoint / "optuna.db").replace(moved / "optuna.db")  # fetched into a new sweep folder
    pickled = pickle.dumps(search)
    shutil.rmtree(first)  # the first driver's folder is gone

    restored = pickle.loads(pickled)
    assert not first.exists()  # no study made at the first driver's path
    restored.use_study(study_url(moved))
    restored.on_trial_result("b", {"step": 20, "eval_loss": 2.5})
    restored.on_trial_complete("b", {"step": 30, "eval_loss": 2.0})
    a, b = study_trials(moved)
    assert (a.state, a.value) == (TrialState.COMPLETE, 1.0)
    assert (b.state, b.intermediate_values) == (TrialState.COMPLETE, {10: 3.0, 20: 2.5, 30: 2.0})
