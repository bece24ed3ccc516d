"""Several objectives: the values a multi-objective study is told (cost objectives worked
out from the trial's time and config), the Pareto front, and the keyed lines of bad input."""

from __future__ import annotations

import itertools
import random

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.errors import UserError
from sweeper.search._objectives import Objectives, dominates, objectives_of, pareto_front
from sweeper.search._searcher import make_searcher
from sweeper.search._study import TUNE_TRIAL_ID_ATTR, study_url
from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep

TWO = [{"metric": "eval_loss", "goal": "minimize"}, {"metric": "adapter_parameters", "goal": "minimize"}]
SEARCHED = {
    "training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 2e-2},
    "lora.r": {"distribution": "categorical", "values": [2, 4, 8]},
}


def spec_of(**search):
    return validate_spec(small_sweep("mo", search={"parameters": SEARCHED, **search}), base_dir=REPO)


def test_the_first_objective_is_the_sweeps_metric():
    spec = spec_of(objectives=TWO)
    assert (spec.search.metric, spec.search.goal) == ("eval_loss", "minimize")


def test_cost_objectives_come_from_the_trials_time_price_and_rank():
    objectives = Objectives(("cost_usd", "accelerator_hours", "adapter_parameters", "eval_loss"),
                            ("minimize",) * 4, accelerators_per_trial=2, usd_per_hour=3.0, layers=2,
                            linear_sizes=(("q_proj", 128), ("up_proj", 240)), lora_r=8, target_modules=("q_proj",))
    values = objectives.values({"time_total_s": 1800, "eval_loss": 1.5}, {"lora.r": 4})
    assert values == [3.0, 1.0, 2 * 4 * 128, 1.5]
    assert objectives.values({"time_total_s": 0}, {})[2:] == [2 * 8 * 128, None]


def test_adapter_parameters_of_the_built_in_model_are_its_lora_parameters():
    import peft
    import torch  # noqa: F401

    from trainables.models import BUILTIN_TINY_MODEL, load_base_model, resolve_model_source

    spec = spec_of(objectives=TWO)
    model = load_base_model(resolve_model_source(BUILTIN_TINY_MODEL))
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=list(spec.lora.target_modules))
    trainable = sum(p.numel() for p in peft.get_peft_model(model, config).parameters() if p.requires_grad)
    assert objectives_of(spec).adapter_parameters({"lora.r": 4}) == trainable


def brute_force_front(points, goals):
    return [p for p in points if not any(dominates(q, p, goals) for q in points if q is not p)]


@pytest.mark.parametrize("seed", range(5))
def test_the_front_is_exactly_the_non_dominated_points(seed):
    rng = random.Random(seed)
    goals = ["minimize", "maximize"]
    points = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(30)] + [(None, 1)]
    front = pareto_front(points, lambda p: p, goals)
    whole = [p for p in points if None not in p]
    assert front == brute_force_front(whole, goals)
    for p, q in itertools.product(front, whole):
        assert not dominates(q, p, goals)
    assert all(any(dominates(f, p, goals) for f in front) for p in whole if p not in front)


def test_a_two_objective_study_holds_every_objective_and_its_front_is_optunas(tmp_path):
    spec = spec_of(objectives=TWO)
    search = make_searcher(spec, tmp_path)
    assert search.study.directions == [optuna.study.StudyDirection.MINIMIZE] * 2
    losses = {}
    for index in range(8):
        trial_id = f"t{index}"
        config = search.suggest(trial_id)
        losses[trial_id] = 3.0 - index * 0.1 + config["lora.r"] * 0.05
        search.on_trial_result(trial_id, {"step": 10, "eval_loss": losses[trial_id] + 1})
        reached = 30 if index != 3 else 10  # one stopped early: pruned, not on the front
        search.on_trial_complete(trial_id, {"step": reached, "eval_loss": losses[trial_id], "time_total_s": 60.0})
    study = optuna.load_study(study_name="mo", storage=study_url(tmp_path))
    trials = study.get_trials()
    assert [t.state for t in trials].count(TrialState.PRUNED) == 1
    for t in trials:
        if t.state == TrialState.COMPLETE:
            assert t.values == [losses[t.user_attrs[TUNE_TRIAL_ID_ATTR]], objectives_of(spec).adapter_parameters(t.params)]
            assert t.intermediate_values == {}
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    front = pareto_front(complete, lambda t: t.values, ["minimize", "minimize"])
    assert {t.number for t in front} == {t.number for t in study.best_trials}


@pytest.mark.parametrize("sections, line", [
    ({"search": {"objectives": [TWO[1], TWO[0]], "parameters": SEARCHED}},
     "search.objectives.0.metric: the first objective picks the best trial and is what early stopping ranks "
     "trials by, and adapter_parameters is none of a trial's reports"),
    ({"search": {"objectives": TWO[:1], "parameters": SEARCHED}}, "search.objectives: give two or more objectives"),
    ({"search": {"objectives": [TWO[0], TWO[0]], "parameters": SEARCHED}},
     "search.objectives.1.metric: 'eval_loss' is an objective already"),
    ({"search": {"objectives": [TWO[0], {"metric": "cost_usd", "goal": "maximize"}], "parameters": SEARCHED}},
     "search.objectives.1.goal: cost_usd is better when lower"),
    ({"search": {"objectives": [TWO[0], {"metric": "bleu", "goal": "maximize"}], "parameters": SEARCHED}},
     "search.objectives.1.metric: 'bleu' is not reported by task 'sft'"),
    ({"search": {"metric": "train_loss", "objectives": TWO, "parameters": SEARCHED}},
     "search.metric: with objectives the first objective is search.metric ('eval_loss'), got 'train_loss'"),
])
def test_bad_objectives_are_one_keyed_line_each(sections, line):
    with pytest.raises(UserError) as caught:
        validate_spec(small_sweep("mo", **sections), base_dir=REPO)
    assert any(l.startswith(line) for l in caught.value.lines), caught.value.lines


def test_a_cost_first_objective_is_refused_without_a_scheduler_too():
    with pytest.raises(UserError) as caught:
        validate_spec(small_sweep("mo", search={"objectives": [TWO[1], TWO[0]], "parameters": SEARCHED},
                                  early_stopping={"scheduler": "none"}), base_dir=REPO)
    assert [l.split(":")[0] for l in caught.value.lines] == ["search.objectives.0.metric"]
