"""TPE learns from every trial: each evaluation a trial reported (MLflow's eval-loss
history, what the terminal showed) is an intermediate value of its Optuna trial at the
training step, read back with optuna.load_study, whatever the scheduler did with the
trial afterwards: paused, promoted, stopped at a rung, or stopped on its first
evaluation (whose result Tune hands the searcher only when the trial completes)."""

import optuna
import pytest
from mlflow.tracking import MlflowClient

from sweeper.search._study import TUNE_TRIAL_ID_ATTR, study_url
from tests.conftest import small_sweep, write_yaml
from tests.integration.conftest import run_cli
from tests.integration.test_tracking import runs_of

pytestmark = pytest.mark.integration


def study_matches_mlflow(workdir, name: str) -> dict[str, dict[int, float]]:
    """Assert every trial's intermediate values equal its eval-loss history in MLflow, and
    pruned trials are PRUNED, completed ones COMPLETE with their last value; returns the
    histories by trial id."""
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    _, children = runs_of(client, name)
    mlflow_history = {
        run.data.tags["sweeper.trial_id"]: {int(p.step): p.value for p in client.get_metric_history(run.info.run_id, "eval_loss")}
        for run in children
    }
    state = {run.data.tags["sweeper.trial_id"]: run.data.tags["sweeper.state"] for run in children}
    study = optuna.load_study(study_name=name, storage=study_url(workdir / "sweeps" / name))
    optuna_trials = {t.user_attrs[TUNE_TRIAL_ID_ATTR]: t for t in study.get_trials()}
    assert set(optuna_trials) == set(mlflow_history)
    for trial_id, history in mlflow_history.items():
        trial = optuna_trials[trial_id]
        assert history, trial_id
        assert {step: pytest.approx(value) for step, value in history.items()} == trial.intermediate_values, trial_id
        expected = {"completed": optuna.trial.TrialState.COMPLETE, "pruned": optuna.trial.TrialState.PRUNED}
        assert trial.state == expected[state[trial_id]], (trial_id, state[trial_id])
        if trial.state == optuna.trial.TrialState.COMPLETE:
            assert trial.value == pytest.approx(history[max(history)])
    return mlflow_history


def test_asha_by_promotion_tells_optuna_every_evaluation(finished_sweep):
    assert finished_sweep.result.returncode == 0, finished_sweep.result.stderr
    histories = study_matches_mlflow(finished_sweep.workdir, finished_sweep.name)
    assert any(len(h) == 1 for h in histories.values())  # pruned at the first rung


def test_trials_stopped_on_their_first_evaluation_keep_it(tmp_path):
    """Ray's ASHA decides on arrival: the trials it stops at step 10 are stopped on the
    result of their first evaluation."""
    raw = small_sweep("arrivals", search={"num_trials": 5, "seed": 3}, early_stopping={"scheduler": "asha_stopping"})
    result = run_cli("start", str(write_yaml(tmp_path / "arrivals.yaml", raw)), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    histories = study_matches_mlflow(tmp_path, "arrivals")
    assert any(len(h) == 1 for h in histories.values()), histories
