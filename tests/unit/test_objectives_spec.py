"""search.metric naming a task metric from generation: what the schema accepts, the keyed
lines for what no trial reports, and the metric the rungs rank by."""

from __future__ import annotations

import pytest

from sweeper.errors import UserError
from sweeper.spec._load import validate_spec
from sweeper.spec._objectives import prune_metric, reported_every_evaluation
from tests.conftest import REPO, small_sweep


def lines_of(raw: dict) -> list[str]:
    with pytest.raises(UserError) as caught:
        validate_spec(raw, base_dir=REPO)
    return caught.value.lines


def test_a_task_metric_generated_at_the_end_is_selected_by_while_the_rungs_rank_by_eval_loss():
    spec = validate_spec(small_sweep("g", generation={"scores": ["exact_match"]},
                                     search={"metric": "gen_exact_match", "goal": "maximize"}), base_dir=REPO)
    assert spec.generation.when == "end"
    assert not reported_every_evaluation(spec, "gen_exact_match")
    assert prune_metric(spec) == ("eval_loss", "minimize")


def test_a_task_metric_generated_at_every_evaluation_ranks_the_rungs_too():
    spec = validate_spec(small_sweep("g", generation={"scores": ["contains"], "when": "every_eval"},
                                     search={"metric": "gen_contains", "goal": "maximize"}), base_dir=REPO)
    assert prune_metric(spec) == ("gen_contains", "maximize")


def test_early_stopping_metric_chooses_what_the_rungs_rank_by():
    spec = validate_spec(small_sweep("g", generation={}, search={"metric": "gen_exact_match", "goal": "maximize"},
                                     early_stopping={"metric": "train_loss"}), base_dir=REPO)
    assert prune_metric(spec) == ("train_loss", "minimize")


@pytest.mark.parametrize("sections, line", [
    ({"search": {"metric": "gen_exact_match", "goal": "maximize"}},
     "search.metric: 'gen_exact_match' is a task metric from generation, and the sweep has no generation section"),
    ({"generation": {"scores": ["contains"]}, "search": {"metric": "gen_exact_match", "goal": "maximize"}},
     "search.metric: 'gen_exact_match' is not among generation.scores (gen_contains)"),
    ({"generation": {}, "search": {"metric": "gen_bleu", "goal": "maximize"}},
     "search.metric: 'gen_bleu' is no built-in score"),
    ({"search": {"metric": "accuracy"}}, "search.metric: 'accuracy' is not reported by task 'sft'"),
    ({"generation": {}, "search": {"metric": "gen_exact_match", "goal": "minimize"}},
     "search.goal: gen_exact_match is better when higher, got 'minimize'; set search.goal: maximize"),
    ({"generation": {}, "early_stopping": {"metric": "gen_exact_match"}},
     "early_stopping.metric: the rungs rank by a metric reported at every evaluation, got 'gen_exact_match'"),
    ({"generation": {}, "trainer": "trl", "trl": {"method": "sft"}},
     "generation: generates in the built-in SFT loop only"),
])
def test_a_metric_no_trial_reports_is_one_keyed_line(sections, line):
    lines = lines_of(small_sweep("g", **sections))
    assert any(l.startswith(line) for l in lines), lines


def test_a_user_scorer_metric_that_the_scorer_does_not_return_is_a_keyed_line(tmp_path):
    from sweeper.plan._inputs import generation_sample
    from trainables.models import BUILTIN_TINY_MODEL, load_tokenizer, resolve_model_source

    (tmp_path / "score.py").write_text("def score(predictions, references, rows):\n    return {'overlap': 1.0}\n")
    raw = small_sweep("g", generation={"scores": [], "scorer": "score.py:score", "samples": 4},
                      search={"metric": "gen_accuracy", "goal": "maximize"})
    spec = validate_spec(raw, base_dir=tmp_path)
    tokenizer = load_tokenizer(resolve_model_source(BUILTIN_TINY_MODEL))
    with pytest.raises(UserError) as caught:
        generation_sample(spec, tokenizer)
    assert caught.value.lines == [
        "search.metric: 'gen_accuracy' is not reported by the generation section; it reports gen_overlap"
    ]
    good = validate_spec({**raw, "search": {**raw["search"], "metric": "gen_overlap"}}, base_dir=tmp_path)
    sample = generation_sample(good, tokenizer)
    assert len(sample.prompts) == 4 and sample.steps == frozenset()


from tests.unit.test_start_input import refused, sweep_file, workdir  # noqa: E402,F401


@pytest.mark.parametrize("source, line", [
    ("import nowhere_to_be_found\n", "generation.scorer: importing "),
    ("def score(predictions, references, rows):\n    return {'overlap': None}\n",
     "generation.scorer: the scorer returned no number for overlap; every value must be a number"),
])
def test_sweep_start_refuses_a_scorer_that_does_not_import_or_returns_no_number(workdir, source, line):
    scorer = workdir / "score.py"
    scorer.write_text(source)
    path = sweep_file(workdir, generation={"scorer": f"{scorer}:score"})
    assert refused(workdir, "start", path).startswith(line)


def test_sweep_validate_refuses_a_metric_no_trial_reports(workdir):
    path = sweep_file(workdir, search={"metric": "gen_exact_match", "goal": "maximize"})
    assert refused(workdir, "validate", path).startswith("search.metric: 'gen_exact_match' is a task metric from generation")
