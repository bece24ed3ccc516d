"""A sweep of several objectives (quality, GPU-hours, adapter size): Optuna's
multi-objective study holds each completed trial's values, `sweep status` and the report
show exactly the non-dominated trials, and `sweep promote --trial` registers a point of
the front."""

from __future__ import annotations

import json

import optuna
import pytest

from sweeper.search._objectives import dominates
from sweeper.search._study import TUNE_TRIAL_ID_ATTR, study_url
from sweeper.track._store import SweepStore
from tests.conftest import markdown_table
from tests.integration.conftest import run_cli as sweep

pytestmark = pytest.mark.integration

GOALS = ["minimize", "minimize", "minimize"]


def test_a_several_objective_sweeps_front_is_exactly_its_non_dominated_trials(sweep_yaml, tmp_path):
    path = sweep_yaml(
        "front",
        search={"num_trials": 3, "method": "grid", "objectives": [
            {"metric": "eval_loss", "goal": "minimize"}, {"metric": "accelerator_hours", "goal": "minimize"},
            {"metric": "adapter_parameters", "goal": "minimize"}],
            "parameters": {"lora.r": {"distribution": "categorical", "values": [1, 2, 8]}}},
        training={"max_steps": 10, "eval_every": 10, "per_device_batch_size": 8, "learning_rate": 1e-2},
        early_stopping={"scheduler": "none"},
    )
    result = sweep("start", str(path), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr

    store = SweepStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    trials = store.trials("front")
    assert trials["state"].to_list() == ["completed"] * 3
    rank = {row["trial_id"]: int(json.loads(row["params"])["lora.r"]) for row in trials.to_dicts()}
    number = dict(zip(trials["trial_id"], trials["trial_number"]))
    study = optuna.load_study(study_name="front", storage=study_url(tmp_path / "sweeps" / "front"))
    assert study.metric_names == ["eval_loss", "accelerator_hours", "adapter_parameters"]
    told = {t.user_attrs[TUNE_TRIAL_ID_ATTR]: t.values for t in study.get_trials()}
    eval_loss = dict(zip(trials["trial_id"], trials["metric"]))
    for trial_id, (loss, hours, parameters) in told.items():
        assert loss == pytest.approx(eval_loss[trial_id])
        assert 0 < hours < 0.1  # seconds of one CPU core
        assert parameters == 2 * rank[trial_id] * (4 * 128 + 3 * 240)  # the tiny Llama's LoRA parameters
    expected = {number[t] for t, v in told.items() if not any(dominates(o, v, GOALS) for o in told.values())}

    status = sweep("status", "front", cwd=tmp_path, timeout=120)
    assert status.returncode == 0, status.stderr
    after = status.stdout.split("Pareto front:", 1)[1]
    assert after.splitlines()[0].startswith(f" {len(expected)} of 3 completed trials")
    shown = {int(line.split("│")[1]) for line in after.splitlines() if line.startswith("│")}
    assert shown == expected

    report = sweep("report", "front", "--out", str(tmp_path / "report"), cwd=tmp_path, timeout=300)
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert {int(row["trial"]) for row in markdown_table(text, "### Pareto front")} == expected
    assert "picked" not in text and "the first of search.objectives" in text  # best_config.yaml's opening line

    point = max(expected)
    promoted = sweep("promote", "front", "--trial", str(point), cwd=tmp_path, timeout=300)
    assert promoted.returncode == 0, promoted.stderr
    assert f"trial {point}" in promoted.stdout
