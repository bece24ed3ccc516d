"""A sweep with search.confirm: after the search, its best configs train again to
max_steps with new seeds, as MLflow child runs of the sweep marked as reruns; the Optuna
study holds the search's trials only; the summary and `sweep status` show the table and
name the winner by mean, and best_config.yaml and the best trial follow it."""

from __future__ import annotations

import json
import statistics

import optuna
import polars as pl
import pytest

from sweeper.names import Tag
from sweeper.search._study import study_url
from sweeper.track._store import SweepStore
from tests.conftest import wait_for
from tests.integration.conftest import kill_driver_and_its_cluster, run_cli, start_driver, sweep_runs
from tests.integration.conftest import run_cli as sweep

pytestmark = pytest.mark.integration

LR = "training.learning_rate"


@pytest.mark.story
def test_a_confirmed_sweep_reruns_its_best_configs_over_new_seeds_and_names_the_winner_by_mean(sweep_yaml, tmp_path):
    path = sweep_yaml(
        "confirmed",
        search={"num_trials": 3, "confirm": {"top": 2, "seeds": 2},
                "parameters": {LR: {"distribution": "log_uniform", "low": 1e-4, "high": 2e-2}}},
        training={"max_steps": 20, "eval_every": 10, "per_device_batch_size": 8, "seed": 5},
        early_stopping={"scheduler": "none"},
    )
    result = sweep("start", str(path), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr

    store = SweepStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    trials = store.trials("confirmed")
    search = trials.filter(pl.col("confirms").is_null()).to_dicts()
    reruns = trials.filter(pl.col("confirms").is_not_null()).to_dicts()
    assert len(search) == 3 and len(reruns) == 2 * 2  # top x seeds, exactly
    assert {r["state"] for r in reruns} == {"completed"} and {r["steps"] for r in reruns} == {20}
    top_two = sorted(search, key=lambda r: r["metric"])[:2]
    by_config: dict[int, dict[int, float]] = {}
    for rerun in reruns:
        params = json.loads(rerun["params"])
        source = next(r for r in search if r["trial_number"] == rerun["confirms"])
        assert params[LR] == json.loads(source["params"])[LR]  # the search trial's config, rerun
        by_config.setdefault(rerun["confirms"], {})[int(params["training.seed"])] = rerun["metric"]
    assert set(by_config) == {r["trial_number"] for r in top_two}
    assert all(set(seeds) == {6, 7} for seeds in by_config.values())  # new seeds, none the search's (5)
    # Each rerun is a real run of its own seed: the two seeds of a config differ.
    assert all(len(set(values.values())) == 2 for values in by_config.values())

    means = {number: statistics.fmean(values.values()) for number, values in by_config.items()}
    winner = min(means, key=means.get)
    promoted = min((r for r in reruns if r["confirms"] == winner), key=lambda r: r["metric"])
    line = f"Winner by mean: trial {winner}'s config (eval_loss {means[winner]:.4f} over 2 seeds)"
    assert line in result.stdout
    assert "Confirmation: the best 2 config(s) again over 2 new seeds" in result.stdout

    study = optuna.load_study(study_name="confirmed", storage=study_url(tmp_path / "sweeps" / "confirmed"))
    assert len(study.get_trials()) == 3  # the reruns are not the search's

    run = store.sweep_run("confirmed")
    assert run.data.tags[Tag.BEST_TRIAL_ID] == promoted["trial_id"]
    best_config = store.artifact_text(run, "best_config.yaml")
    assert best_config.startswith("# Chosen by confirmation (search.confirm)")
    assert f"trial {promoted['trial_number']}, its rerun with seed" in best_config

    status = sweep("status", "confirmed", cwd=tmp_path, timeout=120)
    assert status.returncode == 0, status.stderr
    assert line in status.stdout and "95% interval" in status.stdout


def test_a_driver_killed_during_confirmation_keeps_the_search_and_resume_finishes_the_reruns(sweep_yaml, tmp_path):
    path = sweep_yaml(
        "reconfirmed",
        search={"num_trials": 2, "confirm": {"top": 1, "seeds": 2}, "max_concurrent_trials": 1,
                "parameters": {LR: {"distribution": "log_uniform", "low": 1e-4, "high": 2e-2}}},
        training={"max_steps": 20, "eval_every": 10, "per_device_batch_size": 8},
        early_stopping={"scheduler": "none"},
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def reruns(state=None):
        try:
            _, children = sweep_runs(uri, "reconfirmed")
        except Exception:
            return []
        return [c for c in children if Tag.CONFIRMS in c.data.tags
                and (state is None or c.data.tags.get(Tag.STATE) == state)]

    # The whole local cluster is lost once the first rerun has finished (one at a time: the
    # second is running or about to start).
    driver = start_driver("start", str(path), cwd=tmp_path, env={"TUNE_GLOBAL_CHECKPOINT_S": "3600"})
    wait_for(lambda: len(reruns("completed")) >= 1, 600, "the first rerun to finish", every=0.5)
    kill_driver_and_its_cluster(driver)
    kept = {c.data.tags[Tag.TRIAL_ID]: c.data.metrics["eval_loss"] for c in reruns("completed")}
    assert len(kept) == 1

    result = run_cli("resume", "reconfirmed", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (parent,), children = sweep_runs(uri, "reconfirmed")
    search = [c for c in children if Tag.CONFIRMS not in c.data.tags]
    done = reruns()
    assert len(search) == 2 and {c.data.tags[Tag.STATE] for c in search} == {"completed"}
    assert len(done) == 2 and {c.data.tags[Tag.STATE] for c in done} == {"completed"}
    assert sorted(int(c.data.params["training.seed"]) for c in done) == [1, 2]
    finished = {c.data.tags[Tag.TRIAL_ID]: c.data.metrics["eval_loss"] for c in done}
    assert all(finished[trial_id] == value for trial_id, value in kept.items())  # the rerun before the loss, kept
    assert parent.info.status == "FINISHED"
    assert "Winner by mean: trial " in result.stdout
