"""The forecast of a GRPO sweep (trl.method grpo) counts its generation: every step samples
its completions token by token before it trains on them (rollouts), and every evaluation
samples and rewards a group of completions per eval prompt. The throughput model's
arithmetic, and calibration timing a GRPO step as it is."""

from __future__ import annotations

import pytest

from sweeper.cost._architecture import parameter_count
from sweeper.cost._throughput import (
    DECODE_LAYER_SECONDS, PEAK_TFLOPS, UTILISATION, Decoder, decoding_seconds, modelled_timing,
)
from sweeper.plan import _calibrate as calibration
from sweeper.plan._forecast import forecast_sweep
from sweeper.plan._sweep_plan import make_plan
from sweeper.spec import load_spec, with_overrides
from tests.conftest import REPO
from tests.unit.test_forecast import CPU_BOX

GRPO_TINY = REPO / "search_spaces" / "grpo-tiny.yaml"
# One CPU core's FLOP/s (fp32) at the model's utilisation: grpo-tiny's one worker.
FLOPS = PEAK_TFLOPS["cpu"][1] * 1e12 * UTILISATION["cpu"]


def grpo_tiny(**overrides):
    """search_spaces/grpo-tiny.yaml (micro-batch 8, accumulation 1, completions of up to 8
    tokens, num_generations searched among 2, 4 and 8, 8 eval prompts), with `overrides`."""
    spec = load_spec(GRPO_TINY)
    return with_overrides(spec, overrides, built="a test's GRPO sweep") if overrides else spec


def decoder(spec) -> Decoder:
    return Decoder.of(spec, parameter_count(spec.model.name_or_path), "cpu", 1, FLOPS)


def test_a_forward_while_decoding_costs_at_least_its_weights_read_and_its_layers_host_work():
    tiny = Decoder(parameters=10**6, layers=2, flops_per_second=1e12, bytes_per_second=1e12, weight_bytes=4e6)
    one_row = tiny.forward_seconds(1)
    assert one_row == pytest.approx(4e6 / 1e12 + 2 * DECODE_LAYER_SECONDS)  # the weights' read, not 2 x P FLOPs
    assert tiny.forward_seconds(10_000) == pytest.approx(10_000 * 2 * 10**6 / 1e12 + 2 * DECODE_LAYER_SECONDS)
    # A pass: a forward over the prompts, then one per new token; passes add up.
    assert decoding_seconds(tiny, 3, 8, 100, 10) == pytest.approx(3 * (tiny.forward_seconds(800) + 10 * tiny.forward_seconds(8)))
    # A model known by the size in its name: a Llama's layer per 250 M parameters.
    spec = grpo_tiny()
    assert Decoder.of(spec.model_copy(update={"model": spec.model.model_copy(update={"name_or_path": "org/x-8B"})}),
                      8 * 10**9, "h100", 1, 1e15).layers == 32


def test_a_grpo_step_decodes_its_completions_then_trains_on_prompt_and_completion():
    """grpo-tiny: 8 completions a step (micro-batch 8 x 1), sampled in one generation batch of
    8 rows, each up to 8 tokens after a prompt of data.max_length (96); trained at 6 x P a token."""
    spec = grpo_tiny()
    parameters, tokens = parameter_count(spec.model.name_or_path), 96 + 8
    rollouts = decoding_seconds(decoder(spec), 1, 8, 96, 8)
    training = 8 * tokens * 6 * parameters / FLOPS
    timing = modelled_timing(spec, "cpu", 1)
    assert timing.step_seconds == pytest.approx(rollouts + training)
    # The SFT arithmetic alone (6 x P x data.max_length a row) misses the rollouts' decoding.
    assert timing.step_seconds > 8 * 96 * 6 * parameters / FLOPS + 8 * 2 * DECODE_LAYER_SECONDS
    assert "GRPO: 8 completions of up to 8 tokens sampled a step" in timing.source
    # `sweep plan` says how much of a step is generation.
    assert f"generation {rollouts / (rollouts + training):.0%} of a step" in timing.source


def test_a_grpo_step_grows_with_the_completion_length_and_the_kl_term_and_shrinks_with_reused_batches():
    base = modelled_timing(grpo_tiny(), "cpu", 1).step_seconds
    longer = modelled_timing(grpo_tiny(**{"trl.max_completion_length": 16}), "cpu", 1).step_seconds
    # 8 more forwards of the batch, and 8 more tokens of 8 completions to train on.
    parameters = parameter_count(grpo_tiny().model.name_or_path)
    more = 8 * decoder(grpo_tiny()).forward_seconds(8) + 8 * 8 * 6 * parameters / FLOPS
    assert longer - base == pytest.approx(more)
    # trl.beta > 0: the reference model scores every sampled completion (2 x P a token).
    with_kl = modelled_timing(grpo_tiny(**{"trl.beta": 0.04}), "cpu", 1).step_seconds
    assert with_kl - base == pytest.approx(8 * 104 * 2 * parameters / FLOPS)
    # trl.num_iterations 2: a generation batch trains two steps (half the rollouts a step), and
    # the policy scores it before training (the ratio's old log-probabilities).
    reused = modelled_timing(grpo_tiny(**{"trl.num_iterations": 2}), "cpu", 1).step_seconds
    rollouts = decoding_seconds(decoder(grpo_tiny()), 1, 8, 96, 8)
    assert reused - base == pytest.approx(-rollouts / 2 + 4 * 104 * 2 * parameters / FLOPS)


def test_a_grpo_evaluation_samples_the_largest_group_searched_for_each_eval_prompt():
    """grpo-tiny: 8 eval prompts (data.eval_samples) x 8 (the largest num_generations
    searched) = 64 completions in eval batches of the micro-batch (8), each scored by the policy."""
    spec = grpo_tiny()
    parameters = parameter_count(spec.model.name_or_path)
    sampling = decoding_seconds(decoder(spec), 8, 8, 96, 8)
    scoring = 8 * 8 * 104 * 2 * parameters / FLOPS
    assert modelled_timing(spec, "cpu", 1).eval_seconds == pytest.approx(sampling + scoring)
    smaller = grpo_tiny(**{"search.parameters": {"trl.num_generations": {"distribution": "categorical", "values": [2, 4]}}})
    assert modelled_timing(smaller, "cpu", 1).eval_seconds == pytest.approx((sampling + scoring) / 2)
    # Unset data.eval_samples: GRPO's default sample of 16 prompts (the eval file holds more).
    unset = grpo_tiny(**{"data.eval_samples": None})
    assert modelled_timing(unset, "cpu", 1).eval_seconds == pytest.approx(2 * (sampling + scoring))


def test_the_grpo_forecast_counts_its_rollouts_in_every_case():
    """The step budget (4 to step 4, 1 to step 8: 20 steps; 32 without early stopping) at the
    GRPO step's time, its two evaluations and its starts."""
    spec = grpo_tiny()
    plan = make_plan(spec, CPU_BOX)
    timing = modelled_timing(spec, "cpu", 1)
    forecast = forecast_sweep(plan, timing)
    assert forecast.expected.steps == 20 and forecast.worst.steps == 32
    evaluations = 4 + 1  # every trial at step 4, the promoted one at 8
    starts = 4 + 1  # each trial's first Train run, and the promoted trial's second
    assert forecast.expected.trial_seconds == pytest.approx(
        20 * timing.step_seconds + evaluations * timing.eval_seconds + starts * timing.setup_seconds)
    assert forecast.worst.trial_seconds == pytest.approx(
        32 * timing.step_seconds + 8 * timing.eval_seconds + 4 * timing.setup_seconds)


def test_calibration_times_the_costliest_group_size_and_completion_length():
    spec = grpo_tiny(**{"search.parameters": {
        **{path: dist.model_dump() for path, dist in grpo_tiny().search.parameters.items()},
        "trl.max_completion_length": {"distribution": "categorical", "values": [8, 32]},
    }})
    assert calibration.costliest_overrides(spec) == {"trl.num_generations": 8, "trl.max_completion_length": 32}


def test_the_costliest_config_counts_the_values_a_conditional_branch_searches():
    from sweeper.spec import grpo_costliest

    spec = grpo_tiny(**{"search.parameters": {
        **{path: dist.model_dump() for path, dist in grpo_tiny().search.parameters.items()},
        "trl.loss_type": {"distribution": "categorical", "values": ["dapo", "grpo"], "conditional": {
            "grpo": {"trl.max_completion_length": {"distribution": "categorical", "values": [8, 32]}}}},
    }})
    assert calibration.costliest_overrides(spec) == {"trl.num_generations": 8, "trl.max_completion_length": 32}
    assert grpo_costliest(spec)["max_completion_length"] == 32


# One config (no search): micro-batches of 2 completions, groups of 8 (2 at evaluation).
ONE_CONFIG = {"search.num_trials": 1, "search.parameters": {}, "training.per_device_batch_size": 2,
              "trl.num_generations": 8, "trl.num_generations_eval": 2}


@pytest.mark.parametrize(
    "overrides, micro_batches, steps",
    [
        ({}, 1, calibration.CALIBRATION_STEPS),  # a step samples its own completions
        # 16 micro-batches of 2 completions, groups of 8: timed at 8 micro-batches (16 completions).
        ({**ONE_CONFIG, "training.gradient_accumulation_steps": 16}, 8, calibration.CALIBRATION_STEPS),
        # Groups of 6 from micro-batches of 2 at accumulation 12: not 8 micro-batches (16
        # completions, no whole groups) but 9 (18 completions: 3 groups).
        ({**ONE_CONFIG, "trl.num_generations": 6, "training.gradient_accumulation_steps": 12}, 9,
         calibration.CALIBRATION_STEPS),
        # A generation batch serves 2 steps: the warm-up samples, then 2 whole cycles of 2 steps.
        ({"trl.steps_per_generation": 2}, 1, 5),
        # Each generation batch trains 3 times: a warm-up, then one whole cycle of 3 steps.
        ({"trl.num_iterations": 3}, 1, 4),
    ],
)
def test_a_calibrated_grpo_step_holds_whole_groups_and_whole_sampling_cycles(overrides, micro_batches, steps):
    spec = grpo_tiny(**overrides)
    assert calibration.measured_micro_batches(spec) == micro_batches
    assert calibration.calibration_steps(spec, micro_batches) == steps


def test_measure_runs_a_grpo_calibration_over_whole_sampling_cycles(monkeypatch):
    from tests.unit.test_forecast import steps_and_one_report

    clock, runs = [100.0], []
    monkeypatch.setattr(calibration.time, "time", lambda: clock[0])

    def fake_training(spec, data, source, report, started_at):
        runs.append((spec.training.max_steps, spec.training.gradient_accumulation_steps))
        steps_and_one_report(clock, spec.training.max_steps)(report)  # steps of 50 ms

    monkeypatch.setattr(calibration, "run_training", fake_training)
    timing = calibration.measure(grpo_tiny(**{"trl.steps_per_generation": 2}), {}, "model", started_at=100.0)
    assert runs == [(5, 1)] and timing.step_seconds == pytest.approx(0.05)
