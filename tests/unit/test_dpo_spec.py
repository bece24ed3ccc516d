"""The dpo task in the schema: its section, its metrics, and the errors users meet."""

import pytest

from sweeper.errors import UserError
from sweeper.spec._load import validate_spec
from sweeper.spec._overrides import with_overrides
from trainables.metrics import TASK_METRICS
from tests.conftest import REPO, small_dpo_sweep, small_sweep


def errors_of(raw: dict) -> list[str]:
    with pytest.raises(UserError) as caught:
        validate_spec(raw, base_dir=REPO)
    return caught.value.lines


def test_dpo_sweep_is_valid_and_searches_beta():
    spec = validate_spec(small_dpo_sweep("ok"), base_dir=REPO)
    assert spec.task == "dpo" and spec.dpo.beta == 0.1 and spec.dpo.loss_type == "sigmoid"
    trial = with_overrides(spec, {"dpo.beta": 0.3, "dpo.loss_type": "ipo"})
    assert (trial.dpo.beta, trial.dpo.loss_type) == (0.3, "ipo")


def test_dpo_section_defaults_when_left_out():
    raw = small_dpo_sweep("ok", data={"max_length": 256})
    del raw["dpo"]
    spec = validate_spec(raw, base_dir=REPO)
    assert spec.dpo.beta == 0.1 and spec.dpo.max_prompt_length == 128


def test_sft_has_no_dpo_section():
    spec = validate_spec(small_sweep("ok"), base_dir=REPO)
    assert spec.dpo is None
    assert with_overrides(spec, {"training.learning_rate": 0.01}).dpo is None


@pytest.mark.parametrize("beta", [0, -0.1])
def test_beta_must_be_positive(beta):
    assert errors_of(small_dpo_sweep("x", dpo={"beta": beta})) == [
        f"dpo.beta: Input should be greater than 0 (got {beta})"
    ]


def test_searched_beta_must_stay_positive():
    raw = small_dpo_sweep("x")
    raw["search"]["parameters"]["dpo.beta"] = {"distribution": "uniform", "low": -0.1, "high": 0.5}
    assert errors_of(raw) == [
        "search.parameters.dpo.beta: value -0.1 is invalid for dpo.beta: Input should be greater than 0"
    ]


def test_unknown_loss_type_and_key_in_dpo_section():
    lines = errors_of(small_dpo_sweep("x", dpo={"loss_type": "kto", "betta": 0.2}))
    assert "dpo.loss_type: Input should be 'sigmoid', 'ipo' or 'hinge' (got 'kto')" in lines
    assert any(line.startswith("dpo.betta: unknown key; did you mean 'beta'?") for line in lines)


def test_dpo_keys_on_an_sft_task_are_one_line_each():
    raw = small_sweep("x", dpo={"beta": 0.2})
    raw["search"]["parameters"]["dpo.beta"] = {"distribution": "log_uniform", "low": 0.05, "high": 0.5}
    assert errors_of(raw) == [
        "dpo: only task dpo reads dpo.*, got task 'sft'; set task: dpo or remove it",
        "search.parameters.dpo.beta: only task dpo reads dpo.*, got task 'sft'; set task: dpo or remove it",
    ]


def test_prompt_must_leave_room_for_answers():
    assert errors_of(small_dpo_sweep("x", dpo={"max_prompt_length": 96})) == [
        "dpo.max_prompt_length: must be < data.max_length (96), got 96; lower it or raise data.max_length"
    ]


def test_metric_is_one_the_task_reports_with_its_goal():
    assert set(TASK_METRICS["dpo"]) >= {
        "eval_loss", "eval_rewards_accuracy", "eval_rewards_margin", "eval_rewards_chosen", "eval_rewards_rejected"
    }
    lines = errors_of(small_dpo_sweep("x", search={"metric": "eval_perplexity"}))
    assert lines[0].startswith("search.metric: 'eval_perplexity' is not reported by task 'dpo'; valid: eval_loss")
    assert errors_of(small_dpo_sweep("x", search={"goal": "minimize"})) == [
        "search.goal: eval_rewards_accuracy is better when higher, got 'minimize'; set search.goal: maximize"
    ]
    assert errors_of(small_sweep("x", search={"metric": "eval_rewards_accuracy", "goal": "maximize"}))[0].startswith(
        "search.metric: 'eval_rewards_accuracy' is not reported by task 'sft'"
    )
    margin = validate_spec(small_dpo_sweep("x", search={"metric": "eval_rewards_margin"}), base_dir=REPO)
    assert margin.search.goal == "maximize"


def test_dpo_paths_are_suggested():
    raw = small_dpo_sweep("x")
    raw["search"]["parameters"] = {"dpo.bta": {"distribution": "uniform", "low": 0.1, "high": 0.5}}
    assert errors_of(raw) == ["search.parameters.dpo.bta: no such config field; did you mean 'dpo.beta'?"]
