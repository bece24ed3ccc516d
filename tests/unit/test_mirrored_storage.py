"""The study read from memory and written through to SQLite (sweeper/search/_mirrored_storage.py):
the file holds exactly what a plain SQLite study would, TPE samples the same, and a
mirror opened on the file again continues it."""

from __future__ import annotations

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from sweeper.search._mirrored_storage import MirroredStorage

SPACE = {"lr": FloatDistribution(1e-5, 1e-2, log=True), "r": IntDistribution(2, 16)}


def drive(study: optuna.Study, trials: int, offset: int = 0) -> list[dict]:
    """A sweep's use of the study: an added finished trial and an enqueued config, then
    asks with the fixed space, intermediate values at steps, and each end told; every
    fourth trial left RUNNING, as ASHA by promotion leaves the trials waiting at a rung."""
    if offset == 0:
        study.add_trial(optuna.trial.create_trial(params={"lr": 1e-3, "r": 8}, distributions=SPACE, value=2.5,
                                                  user_attrs={"warm_start_source": "earlier/1"}))
        study.enqueue_trial({"lr": 2e-3, "r": 4}, user_attrs={"warm_start_repeat": True})
    asked = []
    for index in range(offset, offset + trials):
        trial = study.ask(fixed_distributions=SPACE)
        trial.set_user_attr("tune_trial_id", f"t{index}")
        trial.report(3.0 - index / 100, 10)
        asked.append(dict(trial.params))
        if index % 4 == 3:
            continue
        if index % 4 == 0:
            study.tell(trial, state=TrialState.PRUNED)
        elif index % 4 == 1:
            trial.report(2.9 - index / 100, 30)
            study.tell(trial, 2.9 - index / 100)
        else:
            study.tell(trial, state=TrialState.FAIL)
    return asked


def snapshot(study: optuna.Study) -> list[tuple]:
    return [
        (t.number, t.state, t.params, t.values, t.intermediate_values, t.user_attrs)
        for t in study.get_trials(deepcopy=False)
    ]


def new_study(storage, seed: int = 0) -> optuna.Study:
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, constant_liar=False)
    return optuna.create_study(study_name="s", storage=storage, sampler=sampler, load_if_exists=True)


def test_the_file_holds_what_a_plain_sqlite_study_holds_and_tpe_samples_the_same(tmp_path):
    plain = new_study(f"sqlite:///{tmp_path / 'plain.db'}")
    mirrored = new_study(MirroredStorage(f"sqlite:///{tmp_path / 'mirrored.db'}"))
    assert drive(mirrored, 14) == drive(plain, 14)
    from_file = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'mirrored.db'}")
    assert snapshot(from_file) == snapshot(mirrored) == snapshot(plain)
    assert {t.state for t in from_file.get_trials()} == {
        TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING
    }


def test_a_mirror_opened_on_the_file_again_continues_the_same_study(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    drive(new_study(MirroredStorage(url)), 6)
    reopened = new_study(MirroredStorage(url))
    before = snapshot(reopened)
    assert before == snapshot(optuna.load_study(study_name="s", storage=url))
    # A trial left RUNNING goes on: its end reaches the file under its own number.
    running = next(t for t in reopened.get_trials(deepcopy=False) if t.state == TrialState.RUNNING)
    reopened.tell(running.number, 1.5)
    drive(reopened, 3, offset=6)
    after = optuna.load_study(study_name="s", storage=url)
    assert snapshot(after) == snapshot(reopened)
    assert after.trials[running.number].state == TrialState.COMPLETE and after.trials[running.number].value == 1.5
    assert [t.number for t in after.trials] == list(range(len(before) + 3))


def test_reads_do_not_touch_the_file(tmp_path):
    """What makes it fast: with the file gone from under it, the mirror still answers."""
    storage = MirroredStorage(f"sqlite:///{tmp_path / 'study.db'}")
    study = new_study(storage)
    drive(study, 5)
    before = snapshot(study)
    storage.disk.engine.dispose()
    (tmp_path / "study.db").unlink()
    assert snapshot(study) == before and study.best_value == 2.5
