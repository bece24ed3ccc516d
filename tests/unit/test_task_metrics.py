"""Task metrics from generation: the scores on hand-made answers, the user scorer's
keyed errors, the fixed sample, and greedy generation on the built-in tiny model."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SFT_EVAL
from trainables.data import draw_sample
from trainables.errors import InputError
from trainables.task_metrics import (
    GENERATED_ANSWERS,
    GenerationSpec,
    build_sample,
    contains,
    exact_match,
    score_answers,
    scorer_metric_names,
)


def test_exact_match_counts_equal_answers_after_normalising():
    predictions = ["Paris", "  london ", "Rome is the capital", "b  c", ""]
    references = ["paris", "London", "Rome", "B C", "x"]
    assert exact_match(predictions, references) == pytest.approx(3 / 5)


def test_contains_counts_answers_that_hold_the_reference():
    predictions = ["Paris", "the city of  LONDON", "Rome is the capital", "nothing", ""]
    references = ["paris", "London", "Rome", "Madrid", "x"]
    assert contains(predictions, references) == pytest.approx(3 / 5)


def test_scores_need_one_reference_per_answer():
    with pytest.raises(ValueError):
        exact_match(["a", "b"], ["a"])


def test_chrf_is_sacrebleus():
    import sacrebleu

    spec = GenerationSpec(scores=["chrf"])
    metrics = score_answers(spec, ["the cat sat", "a dog"], ["the cat sat on", "a dog"], [{}, {}])
    expected = sacrebleu.corpus_chrf(["the cat sat", "a dog"], [["the cat sat on", "a dog"]]).score
    assert metrics == {"gen_chrf": pytest.approx(expected)}
    assert 0 < metrics["gen_chrf"] < 100


def test_a_user_scorer_is_called_with_the_rows_and_reported_under_the_prefix(tmp_path):
    (tmp_path / "score.py").write_text(
        "def score(predictions, references, rows):\n"
        "    return {'first_letter': sum(p[:1] == r[:1] for p, r in zip(predictions, references)) / len(rows)}\n"
    )
    spec = GenerationSpec(scores=["exact_match"], scorer=f"{tmp_path}/score.py:score")
    metrics = score_answers(spec, ["abc", "xyz"], ["abd", "qrs"], [{"id": 1}, {"id": 2}])
    assert metrics == {"gen_exact_match": 0.0, "gen_first_letter": 0.5}
    assert scorer_metric_names(spec, ["a"], [{}]) == ["gen_exact_match", "gen_first_letter"]


def test_the_scorer_path_is_relative_to_the_sweep_file(tmp_path):
    spec = GenerationSpec.model_validate({"scorer": "score.py:score"}, context={"base_dir": tmp_path})
    assert spec.scorer == f"{tmp_path / 'score.py'}:score"


@pytest.mark.parametrize(
    "source, message",
    [
        (None, "does not exist"),
        ("import no_such_module_here\n", "importing"),
        ("def other(p, r, rows):\n    return {}\n", "has no function 'score'"),
        ("def score(p, r, rows):\n    return 0.5\n", "must return a dict of numbers"),
        ("def score(p, r, rows):\n    return {'x': 'high'}\n", "returned no number for x"),
        ("def score(p, r, rows):\n    raise KeyError('answer')\n", "calling it failed"),
    ],
)
def test_a_scorer_that_does_not_import_or_returns_no_number_is_a_keyed_error(tmp_path, source, message):
    file = tmp_path / f"scorer_{abs(hash(message))}.py"
    if source is not None:
        file.write_text(source)
    spec = GenerationSpec(scorer=f"{file}:score")
    with pytest.raises(InputError) as error:
        scorer_metric_names(spec, ["a"], [{}])
    assert str(error.value).startswith("generation.scorer: ")
    assert message in str(error.value)


def test_the_sample_is_the_same_draw_for_the_same_seed():
    assert draw_sample(5, 200, seed=3) == draw_sample(5, 200, seed=3)
    assert draw_sample(5, 200, seed=3) != draw_sample(5, 200, seed=4)
    assert draw_sample(10, 4, seed=0) == [0, 1, 2, 3]


@pytest.fixture(scope="module")
def tiny():
    from trainables.models import BUILTIN_TINY_MODEL, load_base_model, load_tokenizer, resolve_model_source

    source = resolve_model_source(BUILTIN_TINY_MODEL)
    return load_base_model(source), load_tokenizer(source)


def test_the_sample_holds_chat_prompts_and_their_reference_answers(tiny):
    _, tokenizer = tiny
    sample = build_sample(GenerationSpec(samples=6, seed=1), SFT_EVAL, tokenizer, 96, steps=None)
    assert len(sample.prompts) == len(sample.references) == len(sample.rows) == 6
    for prompt, reference, row in zip(sample.prompts, sample.references, sample.rows):
        assert reference == row["messages"][-1]["content"]
        assert tokenizer.decode(prompt).endswith("<|assistant|>")


def test_generation_on_the_tiny_model_gives_the_same_answers_on_repeat(tiny):
    import torch

    from trainables.common import Workers
    from trainables.generation import generate_answers, task_metrics

    model, tokenizer = tiny
    spec = GenerationSpec(samples=8, batch_size=3, max_new_tokens=12, answers_logged=2)
    sample = build_sample(spec, SFT_EVAL, tokenizer, 96, steps=None)
    workers = Workers(0, 1, torch.device("cpu"))
    first = generate_answers(model, sample, workers)
    assert first == generate_answers(model, sample, workers)
    assert len(first) == 8 and all(isinstance(answer, str) for answer in first)
    # Batched with left padding, the answers are those of each prompt alone.
    alone = [generate_answers(model, build_sample(spec.model_copy(update={"batch_size": 1}), SFT_EVAL, tokenizer, 96, None), workers)]
    assert alone[0] == first
    metrics = task_metrics(model, sample, workers)
    assert metrics["gen_exact_match"] == exact_match(first, sample.references)
    shown = json.loads(metrics[GENERATED_ANSWERS])
    assert [a["answer"] for a in shown] == first[:2] and shown[0]["reference"] == sample.references[0]


def test_steps_are_due_at_every_evaluation_at_rungs_or_at_the_end():
    from trainables.task_metrics import GenerationSample

    every = GenerationSample([], [], [], None, steps=None)
    rungs = GenerationSample([], [], [], None, steps=frozenset({10, 30}))
    end = GenerationSample([], [], [], None, steps=frozenset())
    assert [s for s in (10, 20, 30, 90) if every.due(s, 90)] == [10, 20, 30, 90]
    assert [s for s in (10, 20, 30, 90) if rungs.due(s, 90)] == [10, 30, 90]
    assert [s for s in (10, 20, 30, 90) if end.due(s, 90)] == [90]
