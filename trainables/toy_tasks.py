"""Toy data: the family of small string and arithmetic tasks behind the shipped datasets
(scripts/make_data.py) and the built-in model's pretraining text (trainables/tiny.py),
which a 2-layer model can partly learn. Not a trial's task (sft or dpo): what its
examples ask."""

from __future__ import annotations

import random
import string


def random_word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 6)))


def make_task(rng: random.Random) -> tuple[str, str, str]:
    """One (prompt, correct answer, near-miss answer) triple."""
    kind = rng.choice(["reverse", "upper", "add", "repeat", "first"])
    word = random_word(rng)
    if kind == "reverse":
        wrong = word if word != word[::-1] else word + word[-1]  # a palindrome is its own reverse
        return f"Reverse: {word}", word[::-1], wrong
    if kind == "upper":
        return f"Uppercase: {word}", word.upper(), word
    if kind == "add":
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        return f"Add: {a}+{b}", str(a + b), str(a + b + rng.choice([-2, -1, 1, 2]))
    if kind == "repeat":
        return f"Repeat twice: {word}", f"{word} {word}", word
    return f"First letter: {word}", word[0], word[-1] if word[-1] != word[0] else ("z" if word[0] != "z" else "y")
