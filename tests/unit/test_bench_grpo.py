"""The GRPO benchmark's arithmetic (benchmarks/grpo.py): the best trial at max_steps and its
reward at step 0 (its sweep's evaluation before the first step), the paired difference over
seeds, a step's generation seconds, the forecast's share."""

import math

import pytest

from types import SimpleNamespace

from benchmarks.grpo import Rewards, SeedOutcome, at_step_0, best_at, forecast_share, generation_split, paired, sweep_spec


def test_best_at_takes_the_highest_reward_at_max_steps_among_trials_that_reached_it():
    rewards = {"a": {4: 0.9}, "b": {4: 0.2, 8: 0.5}, "c": {4: 0.3, 8: 0.7}}
    assert best_at(rewards, 8) == ("c", 0.7)


def test_best_at_refuses_a_sweep_without_a_trial_at_max_steps():
    with pytest.raises(RuntimeError, match="max_steps 8"):
        best_at({"a": {4: 0.9}}, 8)


def test_the_untrained_reward_is_the_best_trials_own_step_0_report_the_first_the_driver_kept():
    outcome = SeedOutcome(0)
    rewards = Rewards(outcome, ["training.learning_rate"])
    trial = SimpleNamespace(trial_id="a", config={"training.learning_rate": 0.01})
    for step, reward in ((0, 0.125), (0, 0.5), (4, 0.75), (8, 1.0)):  # a retry evaluated at step 0 again
        rewards.on_trial_result(0, [], trial, {"step": step, "eval_reward": reward})
    assert outcome.rewards == {"a": {0: 0.125, 4: 0.75, 8: 1.0}} and at_step_0(outcome.rewards, "a") == 0.125
    with pytest.raises(RuntimeError, match="no eval_reward at step 0"):
        at_step_0({"b": {4: 0.5}}, "b")


@pytest.mark.parametrize("model", ["tiny", "smollm2"])
def test_every_benchmark_sweep_evaluates_at_step_0(model, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sweep's folder
    assert sweep_spec(model, 3).trl.fields["eval_on_start"] is True


def test_paired_differences_are_after_minus_before_seed_by_seed():
    found = paired([1.0, 0.5, 0.25], [0.5, 0.5, 0.5])
    assert found["diffs"] == [0.5, 0.0, -0.25]
    assert found["mean"] == pytest.approx(0.25 / 3)
    assert found["sd"] == pytest.approx(math.sqrt(((0.5 - 1 / 12) ** 2 + (1 / 12) ** 2 + (0.25 + 1 / 12) ** 2) / 2))
    assert (found["min"], found["max"], found["higher"]) == (-0.25, 0.5, 1)
    assert paired([1.0], [0.0])["sd"] == 0.0


def test_generation_split_pairs_each_generate_call_with_the_step_it_began_and_drops_the_warm_up():
    # The Trainer's global_step is n - 1 while step n generates; step 1 is the warm-up.
    steps = {1: 5.0, 2: 1.0, 3: 1.5}
    generations = [(0, 4.0), (1, 0.25), (1, 0.25), (2, 0.5)]
    assert generation_split(steps, generations) == ([1.0, 1.5], [0.5, 0.5])
    assert generation_split(steps, [], warm_up=0) == ([5.0, 1.0, 1.5], [0.0, 0.0, 0.0])


def test_forecast_share_reads_the_throughput_models_words():
    assert forecast_share("throughput model: ...; GRPO: 8 completions ..., generation 49% of a step, 8 eval") == 0.49
    assert forecast_share("throughput model: 6 x 1 parameters") is None
