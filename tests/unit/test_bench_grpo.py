"""The GRPO benchmark's arithmetic (benchmarks/grpo.py): the best trial at max_steps, the
paired difference over seeds, a step's generation seconds, the forecast's share."""

import math

import pytest

from benchmarks.grpo import best_at, forecast_share, generation_split, paired


def test_best_at_takes_the_highest_reward_at_max_steps_among_trials_that_reached_it():
    rewards = {"a": {4: 0.9}, "b": {4: 0.2, 8: 0.5}, "c": {4: 0.3, 8: 0.7}}
    assert best_at(rewards, 8) == ("c", 0.7)


def test_best_at_refuses_a_sweep_without_a_trial_at_max_steps():
    with pytest.raises(RuntimeError, match="max_steps 8"):
        best_at({"a": {4: 0.9}}, 8)


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
