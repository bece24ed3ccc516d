"""data.eval_samples: every trial evaluates the same seeded sample of the eval split, the
generation sample is drawn from within it, and the whole split is evaluated where it is
unset. The inputs are prepared as `sweep start` prepares them (tiny model, shipped data)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan._inputs import prepare_inputs
from sweeper.spec._load import validate_spec
from trainables.models import DEFAULT_CACHE_ROOT
from tests.conftest import (
    PREFERENCE_EVAL, PREFERENCE_TRAIN, REPO, SFT_EVAL, SFT_TRAIN, merge_sections, small_dpo_sweep, small_sweep,
    write_yaml,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def short_train(tmp_path_factory):
    """The first 40 lines of each shipped train split (the eval splits are whole): the
    train split is tokenized too, and only its size would change."""
    folder = tmp_path_factory.mktemp("train")
    for task, path in (("sft", SFT_TRAIN), ("dpo", PREFERENCE_TRAIN)):
        (folder / f"{task}.jsonl").write_text("\n".join(path.read_text().splitlines()[:40]) + "\n")
    return folder


@pytest.fixture
def eval_split(short_train):
    """The inputs `sweep start` would prepare for a small sweep with `sections`."""

    def prepare(sweep=small_sweep, **sections):
        raw = sweep("x")
        task = raw.get("task", "sft")
        raw = merge_sections(raw, {**sections, "data": {**raw["data"], "train": str(short_train / f"{task}.jsonl"),
                                                        **sections.get("data", {})}})
        return prepare_inputs(validate_spec(raw, base_dir=REPO), DEFAULT_CACHE_ROOT).data  # the tiny model built once

    return prepare


def test_every_trial_evaluates_the_same_rows_of_the_split(eval_split):
    whole = eval_split()["eval"]
    first = eval_split(data={"eval_samples": 20})["eval"]
    # A trial of another seed (a confirmation run, a searched training.seed) gets the same rows.
    again = eval_split(data={"eval_samples": 20}, training={"seed": 7})["eval"]
    assert len(first) == 20 and first.input_ids == again.input_ids and first.labels == again.labels
    rows = [whole.input_ids.index(ids) for ids in first.input_ids]
    assert rows == sorted(rows) and rows != list(range(20))  # drawn across the split, in its order


def test_unset_evaluates_the_whole_split_and_more_than_it_holds_is_all_of_it(eval_split):
    whole = eval_split()["eval"]
    assert len(whole) == sum(1 for line in SFT_EVAL.read_text().splitlines() if line.strip())
    assert eval_split(data={"eval_samples": 10_000})["eval"].input_ids == whole.input_ids


def test_the_generation_sample_is_drawn_from_within_the_eval_sample(eval_split):
    data = eval_split(data={"eval_samples": 12}, generation={"samples": 5, "seed": 3})
    evaluated, generation = data["eval"], data["generation"]
    assert len(generation.prompts) == 5
    for prompt in generation.prompts:
        assert any(ids[: len(prompt)] == prompt for ids in evaluated.input_ids)
    # More prompts asked than the eval sample holds: the eval sample's rows, each once.
    every = eval_split(data={"eval_samples": 12}, generation={"samples": 50})["generation"]
    assert len(every.prompts) == 12


def test_preference_pairs_are_sampled_as_a_whole(eval_split):
    data = eval_split(sweep=small_dpo_sweep, data={"eval": str(PREFERENCE_EVAL), "eval_samples": 6})
    assert len(data["eval"]) == len(data["eval"].chosen) == len(data["eval"].rejected) == 6


@pytest.mark.parametrize("value, expected", [
    (0, "data.eval_samples: Input should be greater than or equal to 1 (got 0)"),
    (-5, "data.eval_samples: Input should be greater than or equal to 1 (got -5)"),
    ("many", "data.eval_samples: Input should be a valid integer, unable to parse string as an integer (got 'many')"),
])
def test_an_eval_sample_that_is_not_a_positive_count_is_one_keyed_line(tmp_path, value, expected):
    path = write_yaml(tmp_path / "x.yaml", small_sweep("x", data={"eval_samples": value}))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"error: {expected}" in result.output.splitlines(), result.output
