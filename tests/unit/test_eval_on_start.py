"""An evaluation before the first step (trl.eval_on_start, trainer trl) without Ray: the
Trainer callback reports it at once as step 0 with no checkpoint and drops the one a
resumed run repeats, the trl engine turns it off when it resumes, the driver's book, the
rungs, the search and median stopping treat step 0 as the base model's (recorded, never
ranked), and the forecast, the budget guard and the live forecast count it once a trial."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sweeper.cost._prices import Rate
from sweeper.plan._forecast import forecast_sweep
from sweeper.plan._sweep_plan import make_plan
from sweeper.spec import evaluates_on_start
from sweeper.spec._load import validate_spec
from sweeper.spec._sections import BudgetSpec
from sweeper.track._book import SweepBook, TrialRecord
from tests.conftest import REPO, small_sweep
from tests.unit.test_forecast import CPU_BOX, TIMING
from tests.unit.test_live_forecast import Clock, Logged, report
from trainables.metrics import before_training


def trl_sweep(eval_on_start: bool | None = True, **sections):
    """A trl SFT sweep: 10 trials, max 90 steps, eval every 10, ASHA rungs 10 and 30."""
    trl = {"method": "sft", **({"eval_on_start": eval_on_start} if eval_on_start is not None else {})}
    raw = small_sweep("e", trainer="trl", trl=trl, training={"max_steps": 90, "eval_every": 10},
                      search={"num_trials": 10},
                      early_stopping={"grace_period": 10, "reduction_factor": 3, "rungs": "all", "startup_trials": 0},
                      **sections)
    return validate_spec(raw, base_dir=REPO)


# ------------------------------------------------------------ in the trial


class Steps:
    """A Trainer's events for ReportEvaluations, as transformers calls them."""

    def __init__(self, callback, output_dir: str, global_step: int = 0):
        from transformers import TrainerControl, TrainerState

        self.callback, self.args = callback, SimpleNamespace(output_dir=output_dir)
        self.state, self.control = TrainerState(global_step=global_step), TrainerControl()
        callback.on_train_begin(self.args, self.state, self.control)

    def evaluate(self, metrics: dict) -> None:
        self.callback.on_log(self.args, self.state, self.control, logs=dict(metrics))
        self.callback.on_evaluate(self.args, self.state, self.control, metrics=dict(metrics))

    def step(self, logs: dict, metrics: dict) -> None:
        self.callback.on_step_begin(self.args, self.state, self.control)
        self.state.global_step += 1
        self.callback.on_step_end(self.args, self.state, self.control)
        self.callback.on_log(self.args, self.state, self.control, logs=dict(logs))
        self.evaluate(metrics)
        self.callback.on_save(self.args, self.state, self.control)


def test_an_evaluation_before_the_first_step_is_reported_at_once_as_step_0_without_a_checkpoint(tmp_path):
    from trainables.hf_reporting import ReportEvaluations

    reports = []
    callback = ReportEvaluations(lambda metrics, folder: reports.append((metrics, folder)), 2, 0.0, eval_every=1)
    trainer = Steps(callback, str(tmp_path))
    trainer.evaluate({"eval_reward": 0.25, "eval_kl": 0.0, "eval_runtime": 3.0})
    assert reports == [({"step": 0, "eval_reward": 0.25, "eval_kl": 0.0}, None)]
    trainer.step({"loss": 0.1, "learning_rate": 0.01, "reward": 0.5}, {"eval_reward": 0.5})
    (metrics, folder), = reports[1:]
    assert (metrics["step"], metrics["eval_reward"], metrics["train_reward"], folder) == (1, 0.5, 0.5, None)
    assert "eval_kl" not in metrics and metrics["setup_seconds"] > 0  # nothing of step 0's carried over


def test_the_step_0_evaluation_leaves_the_random_states_as_it_found_them(tmp_path):
    """GRPO's evaluation samples completions: the trial then trains as without it."""
    import random

    import numpy
    import torch

    from trainables.hf_reporting import ReportEvaluations

    callback = ReportEvaluations(lambda metrics, folder: None, 2, 0.0, eval_every=1)
    torch.manual_seed(0), numpy.random.seed(0), random.seed(0)
    expected = torch.rand(2), numpy.random.rand(), random.random()
    torch.manual_seed(0), numpy.random.seed(0), random.seed(0)
    trainer = Steps(callback, str(tmp_path))
    torch.rand(5), numpy.random.rand(3), random.random()  # the evaluation's sampling
    trainer.evaluate({"eval_reward": 0.25})
    drawn = torch.rand(2), numpy.random.rand(), random.random()
    assert torch.equal(drawn[0], expected[0]) and drawn[1:] == expected[1:]


def test_the_evaluation_a_resumed_run_repeats_before_its_first_step_is_dropped(tmp_path):
    from trainables.hf_reporting import ReportEvaluations

    reports = []
    callback = ReportEvaluations(lambda metrics, folder: reports.append(metrics), 8, 0.0, eval_every=4)
    trainer = Steps(callback, str(tmp_path), global_step=4)  # resumed from the checkpoint of step 4
    trainer.evaluate({"eval_reward": 0.25, "eval_kl": 0.5})
    assert reports == []
    for _ in range(4):
        trainer.step({"loss": 0.1}, {"eval_reward": 0.75} if trainer.state.global_step == 7 else {})
    assert [(m["step"], m["eval_reward"]) for m in reports] == [(8, 0.75)] and "eval_kl" not in reports[0]


def test_the_trl_engine_turns_eval_on_start_off_when_a_trial_resumes(tmp_path):
    from trainables.trl_engine import trl_fields

    config = trl_sweep().trial_config()
    assert trl_fields(config) == {"eval_on_start": True}
    assert trl_fields(config, resume_from=str(tmp_path)) == {"eval_on_start": False}
    assert trl_fields(trl_sweep(None).trial_config(), resume_from=str(tmp_path)) == {"eval_on_start": False}


def test_the_calibration_run_reports_once_without_an_evaluation_before_its_first_step():
    from sweeper.spec import calibration_spec

    spec = trl_sweep()
    assert evaluates_on_start(spec) and not evaluates_on_start(calibration_spec(spec, 4, 1))
    assert not evaluates_on_start(trl_sweep(None)) and not evaluates_on_start(trl_sweep(False))
    assert calibration_spec(trl_sweep(None), 4, 1).trl.fields == {}


def test_a_training_function_may_report_step_0_and_then_its_steps(tmp_path):
    from trainables.function_engine import TrialReporter

    spec = validate_spec(small_sweep("s", training={"max_steps": 20, "eval_every": 10}), base_dir=tmp_path)
    reports = []
    reporter = TrialReporter(lambda metrics, folder: reports.append(metrics), spec.trial_config(), {}, None, 0.0)
    reporter.report({"eval_loss": 3.0}, 0)
    reporter.report({"eval_loss": 2.5}, 10)
    assert [m["step"] for m in reports] == [0, 10]
    with pytest.raises(ValueError, match="step must be an optimizer step >= 0"):
        reporter.report({"eval_loss": 2.0}, -1)


# ------------------------------------------------------------ on the driver


def test_step_0_is_recorded_but_never_ranked_searched_on_or_median_stopped_on(tmp_path):
    import optuna
    from ray.tune.schedulers import TrialScheduler

    from sweeper.search._asha import RungLadder
    from sweeper.search._tune_state import SavedMedianStoppingRule
    from tests.unit.test_search import make_search, study_trials

    assert before_training({"step": 0, "eval_loss": 1.0}) and not before_training({"step": 10})
    ladder = RungLadder([10, 30], reduction_factor=3)
    ladder.record("a", 0, 1.0)
    assert ladder.waiting_at("a") is None and all(not rung.scores for rung in ladder.rungs)

    search = make_search(tmp_path)
    search.suggest("a")
    search.on_trial_result("a", {"step": 0, "eval_loss": 9.0})
    search.on_trial_result("a", {"step": 10, "eval_loss": 3.0})
    search.on_trial_complete("a", {"step": 10, "eval_loss": 3.0})
    (trial,) = study_trials(tmp_path)
    assert (trial.state, trial.intermediate_values) == (optuna.trial.TrialState.PRUNED, {10: 3.0})

    rule = SavedMedianStoppingRule(time_attr="step", metric="eval_loss", mode="min", grace_period=10,
                                   min_samples_required=3)
    assert rule.on_trial_result(None, "a", {"step": 0, "eval_loss": 0.01}) == TrialScheduler.CONTINUE
    assert "a" not in rule._results  # its best would be the base model's value


def test_the_trials_setup_comes_from_its_first_report_after_a_step():
    record = TrialRecord(trial_id="a", number=1, params={}, history=[
        {"step": 0, "eval_loss": 2.0, "setup_phases": {"train_loop_entered": 0.5}},
        {"step": 10, "eval_loss": 1.0, "setup_seconds": 3.0},
    ])
    assert (record.setup_seconds, record.setup_phases, record.step) == (3.0, {"train_loop_entered": 0.5}, 10)


def test_the_forecast_counts_one_evaluation_more_a_trial_in_its_first_run():
    without, with_it = (forecast_sweep(make_plan(trl_sweep(value), CPU_BOX), TIMING) for value in (None, True))
    assert with_it.expected.steps == without.expected.steps
    # 10 trials each evaluate once before their first step; a promoted trial's later run does not.
    assert with_it.expected.trial_seconds == pytest.approx(without.expected.trial_seconds + 10 * TIMING.eval_seconds)
    assert with_it.worst.trial_seconds == pytest.approx(without.worst.trial_seconds + 10 * TIMING.eval_seconds)


def test_the_budget_guard_commits_a_new_trial_with_its_evaluation_before_the_first_step():
    from sweeper.budget._guard import BudgetGuard

    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90)
    guards = [BudgetGuard(BudgetSpec(max_usd=1.0), book, Rate("cpu", 1, 3.6), TIMING, [10, 30, 90], 10, 10,
                          evaluates_on_start=value) for value in (False, True)]
    (steps, plain), (_, first) = (guard.work_to_next_rung(0, start=True) for guard in guards)
    assert steps == 10 and first == pytest.approx(plain + TIMING.eval_seconds)
    # A promoted trial's run starts at its rung: no evaluation before its first step.
    assert guards[1].work_to_next_rung(10, start=True) == guards[0].work_to_next_rung(10, start=True)


def test_the_live_forecast_measures_a_start_from_a_step_0_report_and_an_evaluation_after_it():
    from sweeper.budget._live_forecast import LiveForecast

    plan = make_plan(trl_sweep(), CPU_BOX)
    clock = Clock()
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=90, started_at=clock.now)
    live = LiveForecast(plan, forecast_sweep(plan, TIMING), book, Rate("cpu", 1, 3.6), Logged(), None, clock)
    record = TrialRecord(trial_id="a", number=1, params={}, started_at=clock.now)
    book.trials["a"] = record
    live.trial_started(record)
    clock.now += 2.0  # a start of 1.5 s and the step-0 evaluation (0.5 s, the estimate so far)
    record.history.append({"step": 0, "eval_loss": 2.0})
    live.trial_result(record)
    assert live.measured.starts == 1 and live.measured.start_seconds == pytest.approx(1.5)
    assert live.measured.steps == live.measured.evaluations == 0
    clock.now += 3.0  # 10 steps of 0.2 s, then 1 s of evaluation, checkpoint and report
    record.history.append(report(10, 2.0))
    live.trial_result(record)
    assert (live.measured.starts, live.measured.steps, live.measured.evaluations) == (1, 10, 1)
    assert live.measured.eval_seconds == pytest.approx(1.0)
