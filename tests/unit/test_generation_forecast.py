"""The forecast's generation term: one pass over the sweep's sample at the steps
`generation.when` names, in the expected and the worst case and the `sweep plan` lines."""

from dataclasses import replace

import pytest

from sweeper.budget._guard import make_guard
from sweeper.plan import _calibrate as calibration
from sweeper.cost._throughput import DECODE_LAYER_SECONDS, MEMORY_BANDWIDTH, PEAK_TFLOPS, UTILISATION, modelled_timing
from sweeper.plan._forecast import forecast_lines, forecast_sweep
from sweeper.plan._rungs import generations_between
from sweeper.plan._sweep_plan import generation_steps, make_plan
from sweeper.cost._architecture import parameter_count
from trainables.task_metrics import GenerationSample
from tests.unit.test_forecast import CPU_BOX, TIMING, quickstart_like

# 2 s per generation pass over a sample of 32 prompts.
GENERATING = replace(TIMING, generation_seconds=2.0, generation_prompts=32)


def passes(**sections) -> tuple[float, float]:
    """Generation passes in the expected and the worst case: the seconds a sweep forecasts
    with a generation pass over those without, over the seconds of one pass."""
    plan = make_plan(quickstart_like(**sections), CPU_BOX)
    with_it, without = forecast_sweep(plan, GENERATING), forecast_sweep(plan, TIMING)
    return tuple(
        (getattr(with_it, case).trial_seconds - getattr(without, case).trial_seconds) / 2.0
        for case in ("expected", "worst")
    )


# quickstart_like: 10 trials, the ladder 10 to step 10, 3 to 30, 1 to 90, an evaluation every 10 steps.
@pytest.mark.parametrize(
    "when, expected, worst",
    [
        ("every_eval", 10 * 1 + 3 * 2 + 1 * 6, 10 * 9),  # each evaluation
        ("rungs", 10 + 3 + 1, 10 * 3),  # each rung a trial reaches (10, 30) and max_steps
        ("end", 1, 10),  # each trial that reaches max_steps
    ],
)
def test_a_generation_pass_is_forecast_where_generation_when_runs_it(when, expected, worst):
    assert passes(generation={"when": when}) == pytest.approx((expected, worst))


def test_confirmation_reruns_generate_at_max_steps():
    """search.confirm: 1 config x 2 seeds, each to max_steps, in both cases."""
    assert passes(generation={"when": "end"}, search={"confirm": {"top": 1, "seeds": 2}}) == pytest.approx((3, 12))


def test_generation_runs_at_the_evaluations_on_its_steps_and_at_max_steps():
    assert generations_between(0, 90, 10, 90, None) == 9
    assert generations_between(0, 90, 10, 90, frozenset({10, 30})) == 3
    assert generations_between(10, 30, 10, 90, frozenset({10, 30})) == 1  # 10 is before the stretch
    assert generations_between(0, 95, 10, 95, frozenset({15})) == 1  # no evaluation at 15: at 95 only
    assert generations_between(0, 30, 10, 90, frozenset()) == 0
    assert generation_steps(quickstart_like(generation={"when": "rungs"})) == {10, 30}
    assert generation_steps(quickstart_like(generation={"when": "every_eval"})) is None
    assert generation_steps(quickstart_like()) == frozenset()


def test_the_step_time_line_names_the_generation_pass_only_where_there_is_one():
    plan = make_plan(quickstart_like(generation={"when": "end"}), CPU_BOX)
    line = next(x for x in forecast_lines(forecast_sweep(plan, GENERATING), "CPU core-hours") if x.startswith("Step time"))
    assert "2 s per generation pass (32 prompts)" in line
    lines = forecast_lines(forecast_sweep(plan, TIMING), "CPU core-hours")
    assert not any("generation" in x for x in lines)
    assert forecast_sweep(plan, GENERATING).as_params()["forecast_generation_seconds"] == "2"


def test_the_throughput_model_times_a_pass_as_a_forward_per_generated_token():
    """Greedy decoding of the sample's 4 prompts in one batch: a forward over the prompts,
    then one of the batch per new token, each the longer of its FLOPs and reading every
    weight once, plus the layers' host work (for 4 rows the weights' read is the longer)."""
    spec = quickstart_like(generation={"when": "end", "samples": 4, "max_new_tokens": 8})
    timing = modelled_timing(spec, "cpu", 2)
    flops_per_second = PEAK_TFLOPS["cpu"][1] * 1e12 * UTILISATION["cpu"] * 2
    parameters = parameter_count(spec.model.name_or_path)
    host = 2 * DECODE_LAYER_SECONDS  # the built-in model's 2 layers
    prefill = 4 * spec.data.max_length * 2 * parameters / flops_per_second + host
    weights_read = parameters * 4 / (MEMORY_BANDWIDTH["cpu"] * 2)  # fp32, two cores' bandwidth
    assert weights_read > 4 * 2 * parameters / flops_per_second
    token = weights_read + host
    assert timing.generation_prompts == 4
    assert timing.generation_seconds == pytest.approx(prefill + 8 * token)
    assert timing.generation_seconds > 8 * host  # never faster than the host work of its 8 forwards
    assert modelled_timing(quickstart_like(), "cpu", 2).generation_seconds == 0


def test_measure_times_one_generation_pass_at_the_report_apart_from_the_evaluation(monkeypatch):
    """The sample stays in the calibration's data, due at its one report: the pass that
    report times is the generation's, the rest of the time after the steps the evaluation."""
    steps = calibration.CALIBRATION_STEPS
    clock, due = [100.0], []
    monkeypatch.setattr(calibration.time, "time", lambda: clock[0])

    def fake_training(spec, data, source, report, started_at):
        sample, last = data.get("generation"), spec.training.max_steps
        due.append([step for step in range(1, last + 1) if sample and sample.due(step, last)])
        # 1 s of setup, steps of 50 ms, a 300 ms evaluation, a 1.5 s pass where there is a sample.
        training = steps * 0.05
        clock[0] += 1.0 + training + 0.3 + 1.5
        report({"train_tokens": 1000, "tokens_per_second": 1000 / training, "setup_seconds": 1.05,
                "first_step_seconds": 0.05, **({"generation_seconds": 1.5} if sample else {})}, None)

    monkeypatch.setattr(calibration, "run_training", fake_training)
    spec = quickstart_like(generation={"when": "every_eval"})
    sample = GenerationSample([[1, 2]] * 3, ["a"] * 3, [{}] * 3, tokenizer=None, steps=None)
    timing = calibration.measure(spec, {"generation": sample}, "model", started_at=100.0)
    assert due == [[steps]]
    assert timing.eval_seconds == pytest.approx(0.3) and timing.generation_seconds == pytest.approx(1.5)
    assert timing.generation_prompts == 3
    clock[0] = 100.0
    without = calibration.measure(spec, {}, "model", started_at=100.0)
    assert due[-1] == [] and without.generation_seconds == 0 and without.eval_seconds == pytest.approx(1.8)


def test_the_budget_guard_commits_a_trial_with_its_generation_passes():
    guard = make_guard(quickstart_like(generation={"when": "rungs"}, budget={"max_usd": 1.0}),
                       make_plan(quickstart_like(generation={"when": "rungs"}), CPU_BOX), None,
                       forecast_sweep(make_plan(quickstart_like(), CPU_BOX), GENERATING))
    # To the rung at 10: 10 steps of 0.1 s, an evaluation of 0.5 s, a pass of 2 s; then 20 steps and 2 evaluations.
    assert guard.work_to_next_rung(0)[1] == pytest.approx(1.0 + 0.5 + 2.0)
    assert guard.work_to_next_rung(10)[1] == pytest.approx(2.0 + 1.0 + 2.0)
