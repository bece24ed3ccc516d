import json

import pytest
from typer.testing import CliRunner

from sweeper.plan import _calibrate as calibration
from sweeper.plan._calibrate import costliest_overrides
from sweeper.cli import app
from sweeper.cost._architecture import parameter_count
from sweeper.cost._throughput import PEAK_TFLOPS, UTILISATION, TrialTiming, modelled_timing
from sweeper.plan._forecast import forecast_sweep
from sweeper.plan._rungs import evaluations_between
from sweeper.plan._sweep_plan import ClusterResources, make_plan
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from trainables.task_metrics import GenerationSample

CPU_BOX = ClusterResources(cpus=2, gpus=0, max_node_cpus=2, max_node_gpus=0)
GPU_BOX = ClusterResources(cpus=32, gpus=8, max_node_cpus=32, max_node_gpus=8)
# 1 s per trial start, 0.1 s per step, 0.5 s per evaluation.
TIMING = TrialTiming(step_seconds=0.1, eval_seconds=0.5, setup_seconds=1.0, source="test")


def spec_of(**sections):
    return validate_spec(small_sweep("f", **sections), base_dir=REPO)


def quickstart_like(**sections):
    """10 trials, max 90 steps, eval every 10, ASHA rungs 10 and 30 (eta 3, every rung), no
    startup trials, 2 slots."""
    base = {
        "training": {"max_steps": 90, "eval_every": 10},
        "search": {"num_trials": 10},
        "early_stopping": {"grace_period": 10, "reduction_factor": 3, "rungs": "all", "startup_trials": 0},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    if base["early_stopping"].get("scheduler", "asha") != "asha":
        del base["early_stopping"]["rungs"]  # the sweeper's ASHA's field; Ray's ASHA ranks at every rung
    return spec_of(**base)


def test_expected_case_trains_the_asha_ladder_and_worst_case_every_trial_to_max_steps():
    plan = make_plan(quickstart_like(), CPU_BOX)
    forecast = forecast_sweep(plan, TIMING)
    assert forecast.ladder == [(10, 10), (30, 3), (90, 1)]
    assert forecast.expected.steps == 10 * 10 + 3 * 20 + 1 * 60
    assert forecast.worst.steps == 10 * 90
    # Each segment is a Train run: start + steps + evaluations.
    segments = [1.0 + 10 * 0.1 + 1 * 0.5, 1.0 + 20 * 0.1 + 2 * 0.5, 1.0 + 60 * 0.1 + 6 * 0.5]
    assert forecast.expected.trial_seconds == pytest.approx(10 * segments[0] + 3 * segments[1] + segments[2])
    # The trials' seconds over the 2 slots (more than one trial's climb of the ladder).
    assert forecast.expected.wall_seconds == pytest.approx(forecast.expected.trial_seconds / 2)
    assert forecast.expected.wall_seconds > sum(segments)
    full = 1.0 + 90 * 0.1 + 9 * 0.5
    assert forecast.worst.trial_seconds == pytest.approx(10 * full)
    assert forecast.worst.wall_seconds == pytest.approx(5 * full)


def test_a_startup_trial_climbs_the_ladder_in_one_train_run():
    """early_stopping.startup_trials 1 of 10: it trains to step 90 beside the ladder of the
    other 9 (3 go on from step 10, 1 from step 30) and pays one start, not one per segment."""
    forecast = forecast_sweep(make_plan(quickstart_like(early_stopping={"startup_trials": 1}), CPU_BOX), TIMING)
    assert forecast.ladder == [(10, 10), (30, 4), (90, 2)]
    assert forecast.expected.steps == 10 * 10 + 4 * 20 + 2 * 60
    segments = [1.0 + 10 * 0.1 + 1 * 0.5, 1.0 + 20 * 0.1 + 2 * 0.5, 1.0 + 60 * 0.1 + 6 * 0.5]
    assert forecast.expected.trial_seconds == pytest.approx(10 * segments[0] + 4 * segments[1] + 2 * segments[2] - 2 * 1.0)


def test_a_reused_trial_process_starts_once_per_slot_not_once_per_trial():
    """One-worker trials run in processes Tune reuses: their imports are paid by the first
    trial of each of the 2 slots, not by each of the 10 trials."""
    plan = make_plan(quickstart_like(), CPU_BOX)
    reused = TrialTiming(step_seconds=0.1, eval_seconds=0.5, setup_seconds=1.0, source="test", process_start_seconds=5.0)
    without, once = forecast_sweep(plan, TIMING), forecast_sweep(plan, reused)
    for case in ("expected", "worst"):
        assert getattr(once, case).trial_seconds == pytest.approx(getattr(without, case).trial_seconds + 2 * 5.0)
        assert getattr(once, case).wall_seconds == pytest.approx(getattr(without, case).wall_seconds + 5.0)


def test_cost_is_trial_seconds_times_accelerators_times_price():
    spec = quickstart_like(resources={"workers_per_trial": 2, "cpus_per_worker": 1}, cost={"usd_per_hour": 3.6})
    forecast = forecast_sweep(make_plan(spec, CPU_BOX), TIMING)
    assert forecast.slots == 1 and forecast.rate.accelerators_per_trial == 2
    assert forecast.expected.accelerator_hours == pytest.approx(forecast.expected.trial_seconds / 3600 * 2)
    assert forecast.expected.usd == pytest.approx(forecast.expected.accelerator_hours * 3.6)
    # One slot: the wall time is every trial one after the other.
    assert forecast.worst.wall_seconds == pytest.approx(forecast.worst.trial_seconds)


def test_the_wall_time_is_never_less_than_one_trials_climb_of_the_ladder():
    """More slots than trials: the sweep lasts as long as its longest trial."""
    spec = quickstart_like(search={"num_trials": 3})
    forecast = forecast_sweep(make_plan(spec, ClusterResources(cpus=8, gpus=0, max_node_cpus=8, max_node_gpus=0)), TIMING)
    assert forecast.ladder == [(10, 3), (30, 1), (90, 1)] and forecast.slots == 3
    climb = (1.0 + 10 * 0.1 + 0.5) + (1.0 + 20 * 0.1 + 2 * 0.5) + (1.0 + 60 * 0.1 + 6 * 0.5)
    assert forecast.expected.wall_seconds == pytest.approx(climb)


@pytest.mark.parametrize("scheduler", ["none", "median"])
def test_without_a_known_ladder_the_expected_case_is_the_worst_case(scheduler):
    spec = quickstart_like(early_stopping={"scheduler": scheduler})
    forecast = forecast_sweep(make_plan(spec, CPU_BOX), TIMING)
    assert forecast.expected == forecast.worst


def test_rays_asha_is_assumed_to_follow_the_ladder_with_one_start_per_trial():
    spec = quickstart_like(early_stopping={"scheduler": "asha_stopping", "startup_trials": None})
    forecast = forecast_sweep(make_plan(spec, CPU_BOX), TIMING)
    assert forecast.ladder == [(10, 10), (30, 3), (90, 1)]
    promotion = forecast_sweep(make_plan(quickstart_like(), CPU_BOX), TIMING)
    # Same steps; the promoted trials do not start again.
    assert forecast.expected.steps == promotion.expected.steps
    assert forecast.expected.trial_seconds == pytest.approx(promotion.expected.trial_seconds - (3 + 1) * 1.0)


def test_both_cases_are_costed_at_the_one_timing_given():
    plan = make_plan(quickstart_like(), CPU_BOX)
    costly = TrialTiming(0.3, 0.5, 1.0, "test")
    forecast = forecast_sweep(plan, costly)
    assert forecast.timing == costly
    assert forecast.worst.trial_seconds == pytest.approx(10 * (1.0 + 90 * 0.3 + 9 * 0.5))
    assert forecast.expected.trial_seconds == pytest.approx(
        10 * (1.0 + 10 * 0.3 + 0.5) + 3 * (1.0 + 20 * 0.3 + 2 * 0.5) + (1.0 + 60 * 0.3 + 6 * 0.5)
    )


def test_evaluations_count_the_last_step_when_it_is_not_a_multiple():
    assert evaluations_between(0, 10, 10, 95) == 1
    assert evaluations_between(30, 95, 10, 95) == 7  # 40..90, and 95
    assert evaluations_between(10, 30, 10, 95) == 2


def test_throughput_model_is_six_times_parameters_times_tokens_over_peak():
    spec = spec_of(resources={"use_gpu": True, "gpus_per_worker": 1}, training={"precision": "bf16"}, cost={"accelerator": "h100"})
    parameters = parameter_count(spec.model.name_or_path)
    timing = modelled_timing(spec, "h100", 1)
    tokens_per_step = 8 * 96  # batch 8 x data.max_length 96
    flops = PEAK_TFLOPS["h100"][0] * 1e12 * UTILISATION["gpu"]
    assert timing.step_seconds == pytest.approx(6 * parameters * tokens_per_step / flops)
    assert "6 x" in timing.source and "h100" in timing.source
    # fp32 on the same GPU uses its fp32 peak: slower.
    fp32 = modelled_timing(spec_of(resources={"use_gpu": True, "gpus_per_worker": 1}), "h100", 1)
    assert fp32.step_seconds > timing.step_seconds


def test_model_size_from_config_or_from_the_hub_name(tmp_path):
    config = {"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True, "model_type": "llama"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name in ("model.safetensors", "tokenizer.json"):  # a complete model folder, as validation asks
        (tmp_path / name).write_text("")
    local = spec_of(model={"name_or_path": str(tmp_path)})
    attention = 64 * 64 * 2 + 64 * 32 * 2  # q, o full; k, v with 2 of 4 heads
    assert parameter_count(local.model.name_or_path) == 1000 * 64 + 2 * (attention + 3 * 64 * 128 + 2 * 64) + 64
    # A hub id whose config is neither known nor cached: the size in its name.
    assert parameter_count("someone/Mystery-0.5B-Instruct") == 500_000_000
    assert parameter_count("someone/mystery-model") is None
    # A known one: its published config, the same reader as the memory forecast's.
    assert parameter_count("Qwen/Qwen2.5-0.5B-Instruct") == pytest.approx(0.494e9, rel=0.01)


def test_costliest_config_takes_the_highest_cost_parameters():
    spec = spec_of(search={"parameters": {
        "lora.r": {"distribution": "categorical", "values": [4, 16, 8]},
        "training.per_device_batch_size": {"distribution": "int_uniform", "low": 2, "high": 9, "step": 2},
        "training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-2},
    }})
    assert costliest_overrides(spec) == {"lora.r": 16, "training.per_device_batch_size": 8}


def steps_and_one_report(clock, steps, step=0.05, evaluation=0.3, first_step=0.2, generation=None):
    """A loop's run as the calibration sees it: 1 s of setup, a first step of `first_step`,
    `steps - 1` steps of `step`, an evaluation (and a generation pass), one report."""

    def report_once(report):
        clock[0] += 1.0 + first_step + (steps - 1) * step + evaluation + (generation or 0.0)
        training = first_step + (steps - 1) * step
        report({"train_tokens": 1000, "tokens_per_second": 1000 / training, "setup_seconds": 1.0 + first_step,
                "first_step_seconds": first_step, **({"generation_seconds": generation} if generation else {})}, None)

    return report_once


def test_measure_times_the_steps_after_the_first_and_one_evaluation_from_a_common_start(monkeypatch):
    """CALIBRATION_STEPS steps and one evaluation: the loop's training time less its first
    step's, over the other steps, is the step; the rest of the time to the report the evaluation."""
    steps = calibration.CALIBRATION_STEPS
    clock, runs = [100.0], []
    monkeypatch.setattr(calibration.time, "time", lambda: clock[0])
    run = steps_and_one_report(clock, steps)

    def fake_training(spec, data, source, report, started_at):
        runs.append((spec.training.max_steps, spec.training.eval_every))
        run(report)

    monkeypatch.setattr(calibration, "run_training", fake_training)
    # Startup trials and a rung spacing set in the YAML do not stop the calibration run (scheduler
    # none) from validating.
    spec = quickstart_like(early_stopping={"startup_trials": 2, "rung_spacing": 4})
    timing = calibration.measure(spec, {}, "model", started_at=100.0)
    assert runs == [(steps, steps)]  # one evaluation, after the last step
    assert timing.step_seconds == pytest.approx(0.05) and timing.eval_seconds == pytest.approx(0.3)
    # The loop's setup runs to the end of the first step: a steady step is taken off (what
    # Ray adds to a trial's start is the caller's to add, by the shape of the trial).
    assert timing.setup_seconds == pytest.approx(1.2 - 0.05)


def test_a_later_start_is_one_step_evaluated_on_one_row_without_generation(monkeypatch):
    from trainables.data import TokenizedSplit

    clock, seen = [100.0], []
    monkeypatch.setattr(calibration.time, "time", lambda: clock[0])
    run = steps_and_one_report(clock, 1, first_step=0.3)

    def fake_training(spec, data, source, report, started_at):
        seen.append((spec.training.max_steps, len(data["eval"]), "generation" in data))
        run(report)

    monkeypatch.setattr(calibration, "run_training", fake_training)
    split = TokenizedSplit([[1, 2, 3]] * 50, [[1, 2, 3]] * 50)
    sample = GenerationSample([[1, 2]], ["a"], [{}], tokenizer=None)
    start = calibration.measure_start(quickstart_like(), {"eval": split, "generation": sample}, "model", 0.05)
    assert seen == [(1, 1, False)]
    assert start == pytest.approx(1.3 - 0.05)
    # A step of 16 micro-batches, timed at 8 and scaled to 0.1 s: the start's own step was half of it.
    clock[0] = 100.0
    many = quickstart_like(training={"gradient_accumulation_steps": 16})
    assert calibration.measure_start(many, {"eval": split}, "model", 0.1) == pytest.approx(1.3 - 0.05)


def test_a_step_of_many_micro_batches_is_timed_at_a_few_and_scaled(monkeypatch):
    """`gradient_accumulation_steps: 100000` kept the calibration's steps going for hours:
    a measured step accumulates at most MEASURED_MICRO_BATCHES, and its time is scaled."""
    steps, few = calibration.CALIBRATION_STEPS, calibration.MEASURED_MICRO_BATCHES
    clock, accumulated = [100.0], []
    monkeypatch.setattr(calibration.time, "time", lambda: clock[0])

    def fake_training(spec, data, source, report, started_at):
        accumulated.append(spec.training.gradient_accumulation_steps)
        steps_and_one_report(clock, steps)(report)  # steps of `few` micro-batches, 50 ms each step

    monkeypatch.setattr(calibration, "run_training", fake_training)
    many = calibration.measure(quickstart_like(training={"gradient_accumulation_steps": 100_000}), {}, "model", started_at=100.0)
    assert accumulated == [few]
    assert many.step_seconds == pytest.approx(0.05 * 100_000 / few) and many.eval_seconds == pytest.approx(0.3)
    assert many.setup_seconds == pytest.approx(1.2 - 0.05)
    clock[0] = 100.0
    fewer = calibration.measure(quickstart_like(training={"gradient_accumulation_steps": 2}), {}, "model", started_at=100.0)
    assert accumulated[-1] == 2 and fewer.step_seconds == pytest.approx(0.05)  # measured as it is


def test_sweep_plan_without_calibration_prints_the_forecast(tmp_path):
    result = CliRunner().invoke(app, ["plan", str(REPO / "search_spaces" / "quickstart.yaml"), "--no-calibrate"])
    assert result.exit_code == 0, result.output
    # The quickstart's 10 trials, the default screen: one rung at step 10 keeping a quarter.
    assert "10 to step 10, 2 to step 90" in result.output
    assert "Without early stopping:" in result.output and "throughput model" in result.output


def test_sweep_plan_of_a_gpu_sweep_sizes_against_the_cluster_address_free():
    spec = validate_spec(small_sweep("g", resources={"use_gpu": True, "gpus_per_worker": 1}), base_dir=REPO)
    forecast = forecast_sweep(make_plan(spec, GPU_BOX), TIMING)
    assert forecast.rate.accelerator == "a100-80gb" and forecast.slots == 4  # 4 trials, 8 GPUs


def test_report_shows_the_forecast_beside_the_actual_and_the_budget_cut():
    from reports.build import forecast_rows

    rows = dict(forecast_rows({"forecast_expected_usd": 0.5, "forecast_worst_usd": 2.0, "forecast_expected_wall_seconds": 30.0,
                               "forecast_worst_wall_seconds": 90.0, "budget_trials_stopped": 2.0, "budget_trials_not_started": 3.0}))
    assert rows["forecast cost (expected / without early stopping)"] == "$0.500000 / $2.00"
    assert rows["cut by the budget"] == "2 running trials stopped, 3 not started"
    assert forecast_rows({"cost_usd_total": 1.0}) == []


def test_sweep_start_with_cost_calibrate_false_forecasts_from_the_throughput_model(monkeypatch):
    from rich.console import Console

    from sweeper.plan import _calibrate as calibrate_module
    from sweeper.plan._command import start_forecast

    def no_calibration(*args, **kwargs):
        raise AssertionError("calibrated although cost.calibrate is false")

    monkeypatch.setattr(calibrate_module, "calibrate", no_calibration)
    spec = validate_spec(small_sweep("m", cost={"calibrate": False}), base_dir=REPO)
    console = Console(record=True, width=200)
    forecast = start_forecast(make_plan(spec, CPU_BOX), object(), console)
    assert "throughput model" in forecast.timing.source
    assert "throughput model" in console.export_text()
    default = small_sweep("d")
    del default["cost"]  # the tests' small sweeps skip calibration
    assert validate_spec(default, base_dir=REPO).cost.calibrate is True  # measured by default


def open_ended_like(**budget):
    """quickstart_like without search.num_trials: trials until `budget`'s caps."""
    raw = small_sweep(
        "f", training={"max_steps": 90, "eval_every": 10}, cost={"usd_per_hour": 3.6},
        early_stopping={"grace_period": 10, "reduction_factor": 3, "rungs": "all", "startup_trials": 0},
        budget=budget,
    )
    del raw["search"]["num_trials"]
    return validate_spec(raw, base_dir=REPO)


def test_a_step_cap_buys_the_most_trials_whose_ladder_fits_it():
    """17 trials: 17 x 10 + 5 x 20 + 1 x 60 = 330 steps; 18 would train 420 (6 to step 30, 2
    to the end), over 400."""
    from sweeper.plan._caps import budget_lines

    spec = open_ended_like(max_steps=400)
    plan = make_plan(spec, CPU_BOX)
    assert plan.trials is None and plan.concurrent_trials == 2
    forecast = forecast_sweep(plan, TIMING)
    assert (forecast.bought_trials, forecast.cut_by) == (17, "max_steps")
    assert forecast.ladder == [(10, 17), (30, 5), (90, 1)] and forecast.expected.steps == 330
    # 18 trials would cross the cap: their expected case, all of it, and the cut one.
    eighteen = forecast_sweep(plan.with_trials(18), TIMING)
    assert eighteen.uncapped.steps == 420 and eighteen.expected.steps == 400 and eighteen.cut_by == "max_steps"
    assert forecast.worst.steps == 17 * 90  # those trials without early stopping
    assert forecast.as_params()["forecast_budget_trials"] == "17"
    assert budget_lines(spec.budget, forecast) == [
        "Budget buys: about 17 trials, 1 of them to step 90 (330 training steps); budget.max_steps ends it",
        "Budget max_steps: 400 training steps against 330 expected, 1530 without early stopping: the expected "
        "sweep fits; without early stopping it would be cut",
    ]


def test_a_cap_between_the_case_without_early_stopping_and_a_larger_expected_case_is_said_to_cut_the_sweep():
    """Quickstart-like, a minute a Train run's start against 0.1 s a step: the 4 promoted
    trials' second starts (10 -> 30 -> 90) cost more than pruning saves, so the expected
    case is the larger, and a cap between the two cuts the expected sweep."""
    from sweeper.plan._caps import budget_lines

    slow_start = TrialTiming(step_seconds=0.1, eval_seconds=0.5, setup_seconds=60.0, source="test")
    spec = quickstart_like(budget={"max_usd": 1.0})
    forecast = forecast_sweep(make_plan(spec, CPU_BOX), slow_start)
    expected, without = forecast.uncapped.usd, forecast.worst.usd
    assert expected > without
    between = spec.budget.model_copy(update={"max_usd": (expected + without) / 2})
    (line,) = budget_lines(between, forecast)
    assert line.endswith("the sweep is expected to be cut by it"), line
    above = spec.budget.model_copy(update={"max_usd": expected * 1.01})
    assert budget_lines(above, forecast)[0].endswith("the whole sweep fits")


def test_the_first_cap_that_binds_ends_what_the_budget_buys():
    """$1 per core-hour is 1e-3 per second: the expected case of n trials costs its trial
    seconds in thousandths, counted as for a sweep of n trials."""
    plan = make_plan(open_ended_like(max_steps=10_000, max_usd=0.05), CPU_BOX)
    forecast = forecast_sweep(plan, TIMING)
    n = forecast.bought_trials
    assert forecast.cut_by == "max_usd"
    assert forecast.expected.usd <= 0.05 < forecast_sweep(plan.with_trials(n + 1), TIMING).uncapped.usd
    assert forecast.expected == forecast_sweep(plan.with_trials(n), TIMING).expected


def test_sweep_plan_says_what_a_budget_buys(tmp_path):
    from tests.conftest import write_yaml

    raw = small_sweep("f", budget={"max_steps": 200})
    del raw["search"]["num_trials"]
    result = CliRunner().invoke(app, ["plan", str(write_yaml(tmp_path / "s.yaml", raw)), "--no-calibrate"])
    assert result.exit_code == 0, result.output
    assert "trials until budget.max_steps: 200" in result.output
    assert "Budget buys: about" in result.output and "budget.max_steps ends it" in result.output
