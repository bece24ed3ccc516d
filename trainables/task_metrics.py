"""Task metrics from generation: the `generation` section of the sweep file, the fixed
sample of eval prompts every trial answers, and the scorers that compare the answers
with the references.

A trial generates greedily for the same prompts at the same steps (the sample is drawn
once per sweep, on the driver, by `generation.seed`), so trials compare on equal terms.
The built-in scores are exact match and contains (after trimming, case folding and
collapsing white space) and chrF (sacrebleu); a user scorer, `file.py:function`, is
called as `function(predictions, references, rows)` and returns a dict of numbers.
Each score is reported as `gen_<name>` beside eval loss (`search.metric` may name it).

Pure Python and pydantic at import: the driver, the schema and the read-only commands
import it without torch; sacrebleu is imported only where chrF is scored.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from trainables.errors import InputError
from trainables.metrics import GENERATED_ANSWERS, GENERATION_PREFIX
from trainables.sections import StrictModel

__all__ = [
    "GENERATION_PREFIX", "BUILTIN_SCORES", "GENERATED_ANSWERS", "GenerationSpec", "GenerationSample",
    "generation_metric", "is_generation_metric", "exact_match", "contains", "chrf", "score_answers",
    "load_scorer", "scorer_metric_names", "build_sample",
]


When = Literal["every_eval", "rungs", "end"]


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().casefold())


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Share of predictions equal to their reference, after trimming, case folding and
    collapsing white space."""
    pairs = list(zip(predictions, references, strict=True))
    return sum(_normal(p) == _normal(r) for p, r in pairs) / len(pairs) if pairs else 0.0


def contains(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Share of predictions that contain their reference (normalised as for exact match)."""
    pairs = list(zip(predictions, references, strict=True))
    return sum(_normal(r) in _normal(p) for p, r in pairs) / len(pairs) if pairs else 0.0


def chrf(predictions: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu's corpus chrF (0 to 100) of the predictions against one reference each."""
    from sacrebleu.metrics import CHRF

    return float(CHRF().corpus_score(list(predictions), [list(references)]).score)


BUILTIN_SCORES: dict[str, Callable[[Sequence[str], Sequence[str]], float]] = {
    "exact_match": exact_match,
    "contains": contains,
    "chrf": chrf,
}


def generation_metric(score: str) -> str:
    """The reported name of a score: `exact_match` -> `gen_exact_match`."""
    return GENERATION_PREFIX + score


def is_generation_metric(name: str) -> bool:
    return name.startswith(GENERATION_PREFIX)


class GenerationSpec(StrictModel):
    """Answers generated for a fixed sample of the eval split's prompts, scored against the
    references (task sft with the built-in trainer)."""

    scores: list[Literal["exact_match", "contains", "chrf"]] = Field(
        default_factory=lambda: ["exact_match", "contains"],
        description="Built-in scores, each reported as gen_<score>: exact_match and contains (share of answers "
        "equal to / containing the reference, after trimming, case folding and collapsing white space), chrf "
        "(sacrebleu's corpus chrF, 0 to 100; needs the sacrebleu package).",
    )
    scorer: str | None = Field(
        None,
        description="Your own scorer, FILE.py:FUNCTION (relative to the sweep file): called as "
        "FUNCTION(predictions, references, rows) with the answers, the reference answers and the eval rows as "
        "read; returns a dict of numbers, each reported as gen_<key>.",
    )
    when: When = Field(
        "end",
        description="When a trial generates: every_eval (at every evaluation), rungs (at the early-stopping "
        "rungs and at training.max_steps), end (only a trial that reaches training.max_steps). Where it is not "
        "every_eval and search.metric is a gen_ metric, the rungs rank trials by early_stopping.metric.",
    )
    samples: int = Field(32, ge=1, description="Eval prompts answered, drawn once per sweep (the same for every trial).")
    seed: int = Field(0, ge=0, description="Seed of the draw of the sample.")
    max_new_tokens: int = Field(32, ge=1, description="Most tokens generated per answer (greedy; an end-of-text token stops it).")
    batch_size: int = Field(16, ge=1, description="Prompts generated for at once.")
    answers_logged: int = Field(
        5, ge=0, description="Sample answers (prompt, reference, answer) kept per generation, as an MLflow artifact of the trial."
    )

    @field_validator("scorer", mode="before")
    @classmethod
    def _scorer_relative_to_yaml(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str) or ":" not in value:
            if isinstance(value, str):
                raise ValueError(f"expected FILE.py:FUNCTION, got {value!r}")
            return value
        file, _, function = value.rpartition(":")
        base_dir = (info.context or {}).get("base_dir")
        path = Path(file).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = (Path(base_dir) / path).resolve()
        return f"{path}:{function}"

    def metric_names(self, scorer_keys: Sequence[str] = ()) -> list[str]:
        return [generation_metric(s) for s in self.scores] + [generation_metric(k) for k in scorer_keys]


@dataclass(frozen=True)
class GenerationSample:
    """What every trial answers: the prompts' token ids, the reference answers, the eval
    rows as read (for a user scorer), the tokenizer that decodes the answers, and the
    steps at which to generate (None: at every evaluation)."""

    prompts: list[list[int]]
    references: list[str]
    rows: list[dict]
    tokenizer: Any
    steps: frozenset[int] | None = None
    spec: GenerationSpec = field(default_factory=GenerationSpec)

    def due(self, step: int, max_steps: int) -> bool:
        return step == max_steps or self.steps is None or step in self.steps


@functools.cache
def load_scorer(entry_point: str, key: str = "generation.scorer") -> Callable:
    """The function FILE.py:FUNCTION names; InputError naming `key` where it cannot be
    imported or is not a function."""
    file, _, name = entry_point.rpartition(":")
    path = Path(file)
    if not path.is_file():
        raise InputError(f"{key}: {path} does not exist; give FILE.py:FUNCTION of an existing file")
    module_name = f"sweeper_scorer_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{key}: {path} is not a Python file; give FILE.py:FUNCTION")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's module: any error on import
        raise InputError(f"{key}: importing {path} failed: {type(exc).__name__}: {exc}") from None
    function = getattr(module, name, None)
    if not callable(function):
        found = ", ".join(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")) or "none"
        raise InputError(f"{key}: {path} has no function {name!r}; functions there: {found}")
    return function


def _scorer_values(result: Any, key: str) -> dict[str, float]:
    if not isinstance(result, dict) or not result:
        raise InputError(f"{key}: the scorer must return a dict of numbers, got {type(result).__name__} {result!r:.80}")
    bad = [k for k, v in result.items() if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise InputError(f"{key}: the scorer returned no number for {', '.join(map(str, bad))}; every value must be a number")
    return {k: float(v) for k, v in result.items()}


def scorer_metric_names(spec: GenerationSpec, references: list[str], rows: list[dict]) -> list[str]:
    """The metrics `spec` reports, the user scorer's keys found by calling it once on the
    references as answers; InputError naming generation.scorer where it does not import,
    fails, or returns no number."""
    keys: list[str] = []
    if spec.scorer is not None:
        scorer = load_scorer(spec.scorer)
        try:
            result = scorer(list(references), list(references), list(rows))
        except Exception as exc:  # the user's function
            raise InputError(f"generation.scorer: calling it failed: {type(exc).__name__}: {exc}") from None
        keys = list(_scorer_values(result, "generation.scorer"))
    return spec.metric_names(keys)


def score_answers(spec: GenerationSpec, predictions: list[str], references: list[str], rows: list[dict]) -> dict[str, float]:
    """gen_<score> -> value for the built-in scores and the user scorer's keys."""
    metrics = {generation_metric(s): BUILTIN_SCORES[s](predictions, references) for s in spec.scores}
    if spec.scorer is not None:
        values = _scorer_values(load_scorer(spec.scorer)(predictions, references, rows), "generation.scorer")
        metrics.update({generation_metric(k): v for k, v in values.items() if math.isfinite(v)})
    return metrics


def build_sample(
    spec: GenerationSpec, eval_path, tokenizer, max_length: int, steps: frozenset[int] | None,
    within: list[int] | None = None,
) -> GenerationSample:
    """The sweep's sample of `eval_path` (data.eval): each drawn row's prompt as the model
    sees it (everything before its first target token, a chat row's assistant header
    included) and its reference (the first target span, decoded, its end-of-text token
    left out). A row whose prompt fills data.max_length has no room for an answer and
    is not drawn. `within`: the indices, among those rows, that may be drawn (the eval
    sample of data.eval_samples, which counts the same rows); None: any of them."""
    from trainables.data import IGNORE_INDEX, draw_sample, read_records, sft_example

    prompts, references, rows = [], [], []
    for number, record in read_records(eval_path, "data.eval"):
        ids, labels = sft_example(record, tokenizer, max_length, where=f"data.eval: {eval_path} line {number}")
        first = next((i for i, label in enumerate(labels) if label != IGNORE_INDEX), None)
        if first is None:
            continue
        end = next((i for i in range(first, len(labels)) if labels[i] == IGNORE_INDEX), len(labels))
        target = [t for t in ids[first:end] if t != tokenizer.eos_token_id]
        prompts.append(ids[:first])
        references.append(tokenizer.decode(target, skip_special_tokens=True).strip())
        rows.append(record)
    if not prompts:
        raise InputError("generation: no row of data.eval keeps a reference answer within data.max_length")
    candidates = list(range(len(prompts))) if within is None else within
    chosen = [candidates[i] for i in draw_sample(spec.samples, len(candidates), spec.seed)]
    return GenerationSample(
        [prompts[i] for i in chosen], [references[i] for i in chosen], [rows[i] for i in chosen], tokenizer, steps, spec,
    )
