"""Toy verifiable rewards for GRPO on the shipped chat data (search_spaces/grpo-tiny.yaml).

trl calls each as FUNCTION(prompts, completions, reference=[...], **kwargs) and takes one
float per completion (None: not applicable). A chat prompt's completions are message
lists ([{"role": "assistant", "content": ...}]); a plain prompt's are strings.
`reference` is each row's reference answer: its last assistant turn (or its completion).
The answer is read from a completion's first non-empty line, without a leading "A:" (the
built-in model answers as its pretraining text does: "A: 41").
"""

from __future__ import annotations


def _text(completion) -> str:
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first.removeprefix("A:").strip()


def correct(completions, reference, **kwargs) -> list[float]:
    """1.0 for an answer equal to the reference (trimmed, case kept), else 0.0."""
    return [float(_text(c) == r.strip()) for c, r in zip(completions, reference)]


def prefix(completions, reference, **kwargs) -> list[float]:
    """The share of the reference's characters the answer gets right from its start
    (a denser signal than `correct` for a model that is rarely right at first)."""
    scores = []
    for completion, answer in zip(completions, reference):
        text, answer = _text(completion), answer.strip()
        matched = next((i for i, (a, b) in enumerate(zip(text, answer)) if a != b), min(len(text), len(answer)))
        scores.append(matched / max(len(answer), len(text), 1))
    return scores


def answer_first(completions, **kwargs) -> list[float]:
    """1.0 for a completion whose first line is the answer alone (no leading blank line,
    no "A:" label), else 0.0: a format rule the built-in model learns within steps."""
    scores = []
    for completion in completions:
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        first = text.split("\n", 1)[0].strip()
        scores.append(float(bool(first) and not first.startswith("A:")))
    return scores
