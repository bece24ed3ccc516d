"""GRPO sweeps (trainer: trl, trl.method: grpo) without Ray: the prompts and references
taken from the data section, search.metric's default, the reward functions checked on eval
rows before anything starts, and GRPO's batch rules for fixed and searched values. Each
bad input is one keyed line and exit status 2."""

from __future__ import annotations

import pytest

from sweeper.spec._load import validate_spec
from tests.conftest import small_sweep, write_yaml
from trainables.grpo import grpo_row

REWARD = "def correct(completions, reference, **kwargs):\n    return [1.0 for _ in completions]\n"


def grpo_sweep(tmp_path, reward: str = REWARD, **trl) -> dict:
    (tmp_path / "rewards.py").write_text(reward)
    raw = small_sweep("g", trainer="trl", trl={"method": "grpo", "reward_funcs": ["rewards.py:correct"],
                                                "num_generations": 4, **trl})
    raw["output_dir"] = str(tmp_path / "sweeps" / "g")
    return raw


def refused(tmp_path, raw: dict, command: str = "validate", lines: int = 1) -> str:
    """The first error line of `sweep COMMAND` on `raw`, after checking exit 2, `lines`
    error lines and no traceback."""
    from typer.testing import CliRunner

    from sweeper.cli import app

    result = CliRunner().invoke(app, [command, str(write_yaml(tmp_path / "g.yaml", raw))])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == lines and "Traceback" not in result.output, result.output
    assert not (tmp_path / "sweeps").exists()
    return errors[0].removeprefix("error: ")


def test_a_chat_rows_prompt_is_every_turn_before_its_last_assistant_turn():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add: 2+2"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "Add: 3+3"},
                {"role": "assistant", "content": "6"}]
    assert grpo_row({"messages": messages}, "data.train line 1") == {"prompt": messages[:4], "reference": "6"}
    assert grpo_row({"prompt": "Add: 1+1", "completion": "2"}, "x") == {"prompt": "Add: 1+1", "reference": "2"}


def test_a_grpo_sweep_rewards_the_eval_sample_of_data_eval_samples_16_rows_where_unset(tmp_path):
    from sweeper.plan._inputs import grpo_prompts
    from trainables.data import eval_sample_rows, read_records
    from trainables.grpo import GRPO_EVAL_SAMPLES, grpo_rows

    raw = grpo_sweep(tmp_path)
    every = grpo_rows(read_records(validate_spec(raw, base_dir=tmp_path).data.eval, "data.eval"), "data.eval")
    assert len(every) > GRPO_EVAL_SAMPLES
    unset = grpo_prompts(validate_spec(raw, base_dir=tmp_path))["eval_rows"]
    assert unset == [every[i] for i in eval_sample_rows(GRPO_EVAL_SAMPLES, len(every))]
    raw["data"]["eval_samples"] = 5
    five = grpo_prompts(validate_spec(raw, base_dir=tmp_path))["eval_rows"]
    # The rows of the sweep's eval sample, the same draw a trial's evaluation and calibration use.
    assert five == [every[i] for i in eval_sample_rows(5, len(every))] and len(five) == 5
    assert five == grpo_prompts(validate_spec(raw, base_dir=tmp_path))["eval_rows"]


def test_grpo_ranks_by_the_eval_reward_and_trl_fields_reach_the_trial(tmp_path):
    raw = grpo_sweep(tmp_path, max_completion_length=8)
    raw["search"]["parameters"]["trl.beta"] = {"distribution": "uniform", "low": 0.0, "high": 0.1}
    spec = validate_spec(raw, base_dir=tmp_path)
    assert (spec.search.metric, spec.search.goal) == ("eval_reward", "maximize")
    trial = spec.trial_config().with_values({"trl.beta": 0.05})
    assert trial.trl.config_kwargs() == {"num_generations": 4, "max_completion_length": 8, "beta": 0.05}
    assert trial.trl.reward_funcs == [f"{tmp_path / 'rewards.py'}:correct"]
    raw["search"].update(metric="eval_reward_correct", goal="maximize")
    assert validate_spec(raw, base_dir=tmp_path).search.metric == "eval_reward_correct"


def test_the_shipped_grpo_sweep_validates_and_its_rewards_score_the_references():
    from typer.testing import CliRunner

    from sweeper.cli import app
    from tests.conftest import REPO

    result = CliRunner().invoke(app, ["validate", str(REPO / "search_spaces" / "grpo-tiny.yaml")])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("case, reward, trl, line", [
    ("missing file", None, {"reward_funcs": ["nowhere.py:correct"]},
     "trl.reward_funcs.0: {tmp}/nowhere.py does not exist"),
    ("no such function", REWARD, {"reward_funcs": ["rewards.py:right"]},
     "trl.reward_funcs.0: {tmp}/rewards.py has no function 'right'; functions there: correct"),
    ("does not import", "import nowhere_to_be_found\n", {},
     "trl.reward_funcs.0: importing {tmp}/rewards.py failed: ModuleNotFoundError"),
    ("raises", "def correct(completions, reference, **kwargs):\n    return [1 / 0 for _ in completions]\n", {},
     "trl.reward_funcs.0: calling it on 4 eval rows (the references as completions) failed: ZeroDivisionError"),
    ("no numbers", "def correct(completions, **kwargs):\n    return [None for _ in completions]\n", {},
     "trl.reward_funcs.0: returned no number (only None)"),
    ("not a list", "def correct(completions, **kwargs):\n    return 1.0\n", {},
     "trl.reward_funcs.0: returned float 1.0, not a list"),
    ("not FILE.py:FUNCTION", REWARD, {"reward_funcs": ["rewards:correct"]},
     "trl.reward_funcs: entry 0: expected FILE.py:FUNCTION or a reward model (a hub id like org/name, or a local "
     "folder), got 'rewards:correct'"),
    ("two of one name", REWARD, {"reward_funcs": ["rewards.py:correct", "other.py:correct"]},
     "trl.reward_funcs: entry 1: a reward named 'correct' is reported as eval_reward_correct, the name of another's"),
    ("no reward function", REWARD, {"reward_funcs": []}, "trl.reward_funcs: trl.method grpo needs at least one"),
    ("a weight too many", REWARD, {"reward_weights": [1.0, 0.5]},
     "trl.reward_weights: one weight per reward function: 1 in trl.reward_funcs, got 2 weights"),
])
def test_a_reward_function_that_cannot_score_is_one_keyed_line_exit_2(tmp_path, case, reward, trl, line):
    raw = grpo_sweep(tmp_path, reward or "", **trl)
    if reward is None:
        (tmp_path / "rewards.py").unlink()
    assert refused(tmp_path, raw).startswith(line.format(tmp=tmp_path)), case


@pytest.mark.parametrize("case, trl, training, line", [
    ("one generation", {"num_generations": 1}, {},
     "trl.num_generations: must be >= 2 (a group of one completion has no advantage), got 1"),
    ("generation batch", {"num_generations": 4, "num_generations_eval": 2}, {"per_device_batch_size": 2},
     "trl.num_generations: the generation batch (training.per_device_batch_size 2 x 1 workers x "
     "training.gradient_accumulation_steps 1 = 2) must be divisible by trl.num_generations (4)"),
    ("generation batch of steps", {"num_generations": 4, "num_generations_eval": 2, "steps_per_generation": 3},
     {"per_device_batch_size": 2},
     "trl.num_generations: the generation batch (training.per_device_batch_size 2 x 1 workers x "
     "trl.steps_per_generation 3 = 6) must be divisible by trl.num_generations (4)"),
    ("eval batch", {"num_generations": 4, "num_generations_eval": 3}, {},
     "trl.num_generations_eval: the eval batch (training.per_device_batch_size 8 x 1 workers = 8) must be "
     "divisible by the eval generations (trl.num_generations_eval: 3)"),
    ("eval batch of the default", {"num_generations": 4}, {"per_device_batch_size": 2, "gradient_accumulation_steps": 2},
     "trl.num_generations: the eval batch (training.per_device_batch_size 2 x 1 workers = 2) must be divisible"),
])
def test_fixed_values_that_break_a_grpo_batch_rule_are_refused_naming_it(tmp_path, case, trl, training, line):
    raw = grpo_sweep(tmp_path, **trl)
    raw["training"].update(training)
    assert refused(tmp_path, raw).startswith(line), case


def test_a_search_that_could_draw_a_config_breaking_a_batch_rule_is_refused_naming_it(tmp_path):
    raw = grpo_sweep(tmp_path)
    raw["search"]["parameters"]["trl.num_generations"] = {"distribution": "categorical", "values": [2, 4]}
    raw["search"]["parameters"]["training.per_device_batch_size"] = {"distribution": "categorical", "values": [4, 6]}
    assert refused(tmp_path, raw) == (
        "search.parameters.trl.num_generations: a trial could draw trl.num_generations=4, "
        "training.per_device_batch_size=6, and then trl.num_generations: the generation batch "
        "(training.per_device_batch_size 6 x 1 workers x training.gradient_accumulation_steps 1 = 6) must be divisible "
        "by trl.num_generations (4): each prompt's group of completions is whole; search values that meet the rule in "
        "every combination (e.g. batch sizes that are multiples of each num_generations)"
    )
    raw["search"]["parameters"]["training.per_device_batch_size"]["values"] = [4, 8]
    spec = validate_spec(raw, base_dir=tmp_path)  # every combination meets the rules
    assert "trl.num_generations" in spec.search.parameters


def categorical(values, conditional=None) -> dict:
    return {"distribution": "categorical", "values": values, **({"conditional": conditional} if conditional else {})}


def test_a_batch_field_searched_in_a_conditional_branch_is_checked_with_the_top_level_values(tmp_path):
    raw = grpo_sweep(tmp_path)
    parameters = raw["search"]["parameters"]
    parameters["trl.loss_type"] = categorical(["dapo", "grpo"], {"dapo": {"trl.num_generations": categorical([4, 3])}})
    assert refused(tmp_path, raw).startswith(
        "search.parameters.trl.loss_type.conditional.dapo.trl.num_generations: a trial could draw "
        "trl.num_generations=3, and then trl.num_generations: the generation batch (training.per_device_batch_size 8 "
        "x 1 workers x training.gradient_accumulation_steps 1 = 8) must be divisible by trl.num_generations (3)")
    # The branch's values combine with the top-level search: 8 generations need a batch of 8.
    parameters["trl.loss_type"]["conditional"]["dapo"]["trl.num_generations"]["values"] = [2, 8]
    parameters["training.per_device_batch_size"] = categorical([4, 8])
    assert refused(tmp_path, raw).startswith(
        "search.parameters.trl.loss_type.conditional.dapo.trl.num_generations: a trial could draw "
        "training.per_device_batch_size=4, trl.num_generations=8, and then trl.num_generations: the generation batch")
    parameters["training.per_device_batch_size"]["values"] = [8, 16]
    assert validate_spec(raw, base_dir=tmp_path).search.parameters["trl.loss_type"].conditional


def test_a_batch_fields_value_with_a_branch_is_checked_with_its_branch_only(tmp_path):
    """A trial that draws per_device_batch_size 6 draws num_generations from its branch (3
    or 6), never the fixed 4: 6 with 4 is no config any trial runs."""
    raw = grpo_sweep(tmp_path)  # trl.num_generations: 4
    raw["search"]["parameters"]["training.per_device_batch_size"] = categorical(
        [4, 6], {6: {"trl.num_generations": categorical([3, 6])}})
    assert "training.per_device_batch_size" in validate_spec(raw, base_dir=tmp_path).search.parameters
    raw["search"]["parameters"]["training.per_device_batch_size"]["conditional"][6]["trl.num_generations"] = \
        categorical([3, 4])
    assert refused(tmp_path, raw).startswith(
        "search.parameters.training.per_device_batch_size.conditional.6.trl.num_generations: a trial could draw "
        "training.per_device_batch_size=6, trl.num_generations=4, and then trl.num_generations")


def test_a_grpo_sweep_ranked_by_its_loss_is_refused_saying_why(tmp_path):
    raw = grpo_sweep(tmp_path)
    raw["search"].update(metric="eval_loss", goal="minimize")
    assert refused(tmp_path, raw).startswith("search.metric: a GRPO trial's loss is no measure of progress")


def test_grpo_is_not_searched_among_methods_nor_trained_on_preference_pairs(tmp_path):
    raw = grpo_sweep(tmp_path)
    del raw["trl"]["num_generations"]
    raw["search"]["parameters"]["trl.method"] = {"distribution": "categorical", "values": ["sft", "grpo"]}
    assert refused(tmp_path, raw, lines=2).startswith(
        "search.parameters.trl.method: value 'sft' is invalid for trl.method: reward_funcs: only trl.method grpo")
    del raw["search"]["parameters"]["trl.method"]
    raw["task"], raw["dpo"] = "dpo", {"max_prompt_length": 64}
    assert refused(tmp_path, raw).startswith("task: trl.method grpo trains on chat or prompt/completion examples")


def test_reward_functions_belong_to_grpo_only(tmp_path):
    raw = small_sweep("g", trainer="trl", trl={"method": "sft", "reward_funcs": ["r.py:f"]})
    raw["output_dir"] = str(tmp_path / "sweeps" / "g")
    assert refused(tmp_path, raw).startswith("trl.reward_funcs: only trl.method grpo reads reward functions")
