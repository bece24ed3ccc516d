"""A sweep that selects by a task metric from generation and prunes by eval loss: the
metric reaches MLflow at the chosen steps, and the Optuna study holds those values; the
calibrated forecast counts a generation pass."""

from __future__ import annotations

import json

import mlflow
import optuna
import pytest

from sweeper.search._study import TUNE_TRIAL_ID_ATTR, study_url
from sweeper.track._store import SweepStore
from tests.integration.conftest import run_cli as sweep
from tests.integration.test_tracking import runs_of

pytestmark = pytest.mark.integration


def test_a_sweep_selects_by_a_generated_metric_reported_at_the_rungs_and_the_end(sweep_yaml, tmp_path):
    (tmp_path / "score.py").write_text(
        "def score(predictions, references, rows):\n"
        "    return {'answer_chars': sum(len(p) for p in predictions) / len(predictions)}\n"
    )
    path = sweep_yaml(
        "generated",
        generation={"scores": ["exact_match"], "scorer": str(tmp_path / "score.py") + ":score", "when": "rungs",
                    "samples": 6, "max_new_tokens": 6},
        search={"num_trials": 3, "metric": "gen_answer_chars", "goal": "maximize", "method": "random", "seed": 1,
                "parameters": {"training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 2e-2}}},
        training={"max_steps": 20, "eval_every": 10, "per_device_batch_size": 8},
        early_stopping={"scheduler": "asha", "grace_period": 10, "reduction_factor": 3},
        cost={"calibrate": True},
    )
    result = sweep("start", str(path), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    # The calibration timed one generation pass of the 6 prompts, which the forecast counts.
    assert "s per generation pass (6 prompts) (calibrated" in result.stdout, result.stdout

    store = SweepStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    trials = store.trials("generated")
    assert sorted(trials["state"].to_list()) == ["completed", "pruned", "pruned"]
    history = store.history(keys=("gen_answer_chars", "gen_exact_match", "eval_loss"), trials=trials)
    by_trial: dict[int, dict[str, dict[int, float]]] = {}
    for row in history.to_dicts():
        by_trial.setdefault(row["trial_number"], {}).setdefault(row["key"], {})[row["step"]] = row["value"]
    rows = {row["trial_number"]: row for row in trials.to_dicts()}
    for number, keys in by_trial.items():
        # Generated at the rung (10) and at max_steps (20), not at every evaluation.
        expected = [10, 20] if rows[number]["state"] == "completed" else [10]
        assert sorted(keys["gen_answer_chars"]) == sorted(keys["gen_exact_match"]) == expected
        assert all(0 <= v <= 1 for v in keys["gen_exact_match"].values())
    # The rung ranked by eval loss: the trial that went on had the best eval loss at step 10.
    winner = next(n for n, row in rows.items() if row["state"] == "completed")
    assert min(by_trial, key=lambda n: by_trial[n]["eval_loss"][10]) == winner

    # The study was told the task metric: the completed trial's value is its last one,
    # every trial's intermediate values are those at the rung.
    study = optuna.load_study(study_name="generated", storage=study_url(tmp_path / "sweeps" / "generated"))
    run_of = {row["trial_id"]: number for number, row in rows.items()}
    for frozen in study.get_trials():
        number = run_of[frozen.user_attrs[TUNE_TRIAL_ID_ATTR]]
        values = by_trial[number]["gen_answer_chars"]
        assert frozen.intermediate_values == values
        if frozen.state == optuna.trial.TrialState.COMPLETE:
            assert number == winner and frozen.value == values[20]
        else:
            assert frozen.state == optuna.trial.TrialState.PRUNED
    # A few answers per generation, as an artifact of the trial's run.
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (parent,) = runs_of(client, "generated")[0]
    assert float(parent.data.params["forecast_generation_seconds"]) > 0
    files = [f.path for f in client.list_artifacts(rows[winner]["run_id"], "answers")]
    assert files == ["answers/step-000010.json", "answers/step-000020.json"]
    local = client.download_artifacts(rows[winner]["run_id"], files[-1], str(tmp_path / "downloaded"))
    answers = json.loads(open(local).read())
    assert len(answers) == 5 and {"prompt", "reference", "answer"} <= set(answers[0])
