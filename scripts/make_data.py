"""Regenerate the shipped datasets deterministically: `python scripts/make_data.py`.

A family of small string and arithmetic tasks that a 2-layer model can partly learn, so
that fine-tuning shows a real landscape over learning rate and rank. The SFT set uses
chat `messages`; the preference set (DPO), in the same chat form, pairs the correct answer
(chosen) with a near miss of the same task (rejected), so SFT-then-DPO on the built-in
model tells one story.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from trainables.toy_tasks import make_task

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
SYSTEM_PROMPT = "Answer with the result only."


def sft_record(rng: random.Random) -> dict:
    prompt, answer, _ = make_task(rng)
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    if rng.random() < 0.3:
        messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
    return {"messages": messages}


def preference_record(rng: random.Random) -> dict:
    """Chat messages like the SFT set, so a DPO sweep can start from an SFT adapter."""
    prompt, answer, near_miss = make_task(rng)
    turns = [{"role": "user", "content": prompt}]
    if rng.random() < 0.3:
        turns.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
    return {
        "prompt": turns,
        "chosen": [{"role": "assistant", "content": answer}],
        "rejected": [{"role": "assistant", "content": near_miss}],
    }


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def main() -> None:
    for folder, make, sizes in (("sft", sft_record, (2000, 200)), ("preference", preference_record, (1000, 200))):
        for split, size, seed in (("train", sizes[0], 1), ("eval", sizes[1], 2)):
            rng = random.Random(f"{folder}-{split}-{seed}")
            write_jsonl(DATA_DIR / folder / f"{split}.jsonl", [make(rng) for _ in range(size)])
            print(f"wrote {DATA_DIR / folder / f'{split}.jsonl'} ({size} lines)")


if __name__ == "__main__":
    main()
