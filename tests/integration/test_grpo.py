"""A GRPO sweep for real (trainer: trl, trl.method: grpo): the shipped
search_spaces/grpo-tiny.yaml on a real local Ray cluster, real MLflow and the built-in
model, with its toy verifiable rewards (examples/grpo_rewards.py). Every evaluation
reports the mean reward, each reward function's and GRPO's diagnostics (KL to the base
with trl.beta > 0) to MLflow, ASHA ranks by the eval reward, and the best trial is the one
with the highest."""

from __future__ import annotations

import pytest
import yaml

from sweeper.track._store import SweepStore, best_trial_row
from tests.conftest import REPO, write_yaml
from tests.integration.conftest import run_cli as sweep

pytestmark = pytest.mark.integration

GRPO_KEYS = ("eval_reward", "eval_reward_answer_first", "eval_reward_correct", "eval_reward_std",
             "eval_frac_reward_zero_std", "eval_completion_length", "eval_kl", "train_reward")


@pytest.mark.story
def test_a_grpo_sweep_reports_rewards_and_picks_the_best_trial_by_eval_reward(tmp_path):
    raw = yaml.safe_load((REPO / "search_spaces" / "grpo-tiny.yaml").read_text())
    raw["trl"]["reward_funcs"] = [f"{REPO / 'examples' / 'grpo_rewards.py'}:{name}" for name in ("answer_first", "correct")]
    raw["data"].update(train=str(REPO / "data" / "sft" / "train.jsonl"), eval=str(REPO / "data" / "sft" / "eval.jsonl"))
    raw["trl"]["beta"] = 0.04  # a KL term: eval_kl is reported
    raw["search"].update(num_trials=3, seed=0)
    raw["output_dir"] = str(tmp_path / "sweeps" / "grpo-tiny")
    result = sweep("start", str(write_yaml(tmp_path / "grpo.yaml", raw)), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout[-3000:])
    assert "trl.num_generations=" in result.stdout and "eval_reward" in result.stdout

    store = SweepStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = store.sweep_run("grpo-tiny")
    trials = store.trials("grpo-tiny")
    assert set(trials["state"].to_list()) <= {"completed", "pruned"} and "completed" in trials["state"].to_list()
    first_rung = store.history(keys=GRPO_KEYS, trials=trials).filter(step=4)
    for key in GRPO_KEYS:  # every trial reported each at the first rung
        assert first_rung.filter(key=key).height == len(trials), (key, first_rung)
    rewards_at_first_rung = first_rung.filter(key="eval_reward")["value"]
    assert rewards_at_first_rung.is_between(0.0, 2.0).all() and rewards_at_first_rung.max() > 0  # two rewards in [0, 1]

    rewards = {row["trial_id"]: row["metric"] for row in trials.filter(state="completed").to_dicts()}
    best = best_trial_row(trials, "maximize")
    assert best["metric"] == max(rewards.values()) and store.trial(run)["trial_id"] == best["trial_id"]
    assert "by search.metric eval_reward (maximize)" in store.artifact_text(run, "best_config.yaml")
