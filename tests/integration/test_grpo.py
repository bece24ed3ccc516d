"""A GRPO sweep for real (trainer: trl, trl.method: grpo): the shipped
search_spaces/grpo-tiny.yaml on a real local Ray cluster, real MLflow and the built-in
model, with its toy verifiable rewards (examples/grpo_rewards.py). Every evaluation
reports the mean reward, each reward function's and GRPO's diagnostics (KL to the base
with trl.beta > 0) to MLflow, ASHA ranks by the eval reward, and the best trial is the one
with the highest. Each trial evaluates before its first step (trl.eval_on_start): MLflow
holds its reward at step 0 once, and the rungs leave it out. The sweep is killed with
kill -9 (driver and cluster) once a trial has finished and resumed to its end: no
finished trial trains again, no evaluation is lost or repeated, and the rung still
promotes the trial with the highest reward."""

from __future__ import annotations

import pytest
import yaml

from sweeper.track._store import SweepStore, best_trial_row
from tests.conftest import REPO, wait_for, write_yaml
from tests.integration.conftest import kill_driver_and_its_cluster, run_cli as sweep, start_driver, sweep_runs

pytestmark = pytest.mark.integration

GRPO_KEYS = ("eval_reward", "eval_reward_answer_first", "eval_reward_correct", "eval_reward_std",
             "eval_frac_reward_zero_std", "eval_completion_length", "eval_kl", "train_reward")


def reward_curves(uri: str, children) -> dict[str, list[tuple[int, float]]]:
    """Each trial's eval_reward by step, as MLflow holds it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return {c.data.tags["sweeper.trial_id"]: sorted((point.step, point.value)
                                                    for point in client.get_metric_history(c.info.run_id, "eval_reward"))
            for c in children}


@pytest.mark.story
def test_a_grpo_sweep_resumes_after_kill_9_ranks_by_eval_reward_and_picks_the_best_trial(tmp_path):
    raw = yaml.safe_load((REPO / "search_spaces" / "grpo-tiny.yaml").read_text())
    raw["trl"]["reward_funcs"] = [f"{REPO / 'examples' / 'grpo_rewards.py'}:{name}" for name in ("answer_first", "correct")]
    raw["data"].update(train=str(REPO / "data" / "sft" / "train.jsonl"), eval=str(REPO / "data" / "sft" / "eval.jsonl"))
    raw["trl"]["beta"] = 0.04  # a KL term: eval_kl is reported
    raw["trl"]["eval_on_start"] = True  # the base model's reward at step 0
    raw["search"].update(num_trials=3, seed=0)
    # The startup trial trains to max_steps unranked and finishes while the two ranked trials
    # still climb to the rung at step 4, where one waits for the other and the better goes on.
    raw["early_stopping"]["startup_trials"] = 1
    raw["output_dir"] = str(tmp_path / "sweeps" / "grpo-tiny")
    path = write_yaml(tmp_path / "grpo.yaml", raw)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def finished_children():
        try:
            children = sweep_runs(uri, "grpo-tiny")[1]
        except Exception:  # the store is still being created
            return []
        return [c for c in children if c.data.tags.get("sweeper.state") in ("completed", "pruned")]

    # 1. Lose the driver and its whole cluster (kill -9) once a trial has finished.
    driver = start_driver("start", str(path), cwd=tmp_path)
    wait_for(finished_children, 600, "a finished GRPO trial", every=0.5)
    kill_driver_and_its_cluster(driver)
    (parent,), children = sweep_runs(uri, "grpo-tiny")
    assert parent.info.status == "RUNNING", "the kill came after the sweep's end: nothing was left to resume"
    finished = {c.data.tags["sweeper.trial_id"]: c for c in finished_children()}
    curves_before = reward_curves(uri, children)

    # 2. Resume to the end on a new cluster.
    result = sweep("resume", "grpo-tiny", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout[-3000:])
    assert "trl.num_generations=" in result.stdout and "eval_reward" in result.stdout

    store = SweepStore(uri)
    run = store.sweep_run("grpo-tiny")
    trials = store.trials("grpo-tiny")
    assert run.info.status == "FINISHED" and trials.height == trials["trial_id"].n_unique() == 3
    assert set(trials["state"].to_list()) <= {"completed", "pruned"} and "completed" in trials["state"].to_list()
    # A trial finished before the kill was not trained again: its state, reward and reward
    # curve are as they were. No evaluation before the kill is lost, none is made twice.
    (parent,), children = sweep_runs(uri, "grpo-tiny")
    curves = reward_curves(uri, children)
    by_id = {c.data.tags["sweeper.trial_id"]: c for c in children}
    for trial_id, before in finished.items():
        assert by_id[trial_id].data.tags["sweeper.state"] == before.data.tags["sweeper.state"]
        assert by_id[trial_id].data.metrics["eval_reward"] == before.data.metrics["eval_reward"]
        assert curves[trial_id] == curves_before[trial_id]
    for trial_id, curve in curves.items():
        steps = [step for step, _ in curve]
        assert steps == sorted(set(steps)), (trial_id, curve)
        assert set(curves_before.get(trial_id, [])) <= set(curve), (trial_id, curves_before[trial_id], curve)
        # Its evaluation before the first step, once (not again when promoted, resumed or retried).
        assert steps[0] == 0 and steps.count(0) == 1 and max(steps) > 0, (trial_id, curve)

    first_rung = store.history(keys=GRPO_KEYS, trials=trials).filter(step=4)
    for key in GRPO_KEYS:  # every trial reported each at the first rung
        assert first_rung.filter(key=key).height == len(trials), (key, first_rung)
    rewards_at_first_rung = first_rung.filter(key="eval_reward")["value"]
    assert rewards_at_first_rung.is_between(0.0, 2.0).all() and rewards_at_first_rung.max() > 0  # two rewards in [0, 1]

    # ASHA by promotion on reward: of the two ranked trials, the first at the rung waited
    # there, and the one with the higher eval_reward at step 4 went on to max_steps.
    ranked = trials.filter(startup_trial=False)
    assert ranked.height == 2 and ranked["pauses"].sum() >= 1, ranked
    # Step 0 is no rung: no trial paused there (each pause is logged at its step).
    pauses = store.history(keys=("pauses",), trials=trials)
    assert pauses.filter(step=4).height >= 1 and pauses.filter(step=0).height == 0, pauses
    at_rung = {trial_id: dict(curves[trial_id])[4] for trial_id in ranked["trial_id"]}
    (promoted,) = ranked.filter(steps=8)["trial_id"].to_list()
    assert at_rung[promoted] == max(at_rung.values()), at_rung
    assert ranked.filter(steps=4)["state"].to_list() == ["pruned"]

    rewards = {row["trial_id"]: row["metric"] for row in trials.filter(state="completed").to_dicts()}
    best = best_trial_row(trials, "maximize")
    assert best["metric"] == max(rewards.values()) and store.trial(run)["trial_id"] == best["trial_id"]
    assert "by search.metric eval_reward (maximize)" in store.artifact_text(run, "best_config.yaml")
