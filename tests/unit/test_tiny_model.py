"""The tiny model's builder: the built-in model's pretraining by default, or a base of the
same shape pretrained on other texts (benchmarks/search_quality.py builds its own)."""

import random

from transformers import AutoModelForCausalLM

from trainables import tiny


def test_build_pretrains_on_the_given_texts_for_the_given_steps(tmp_path):
    drawn: list[str] = []

    def text(rng: random.Random) -> str:
        drawn.append(f"<|user|>Sort: {rng.choice('abc')}<|end|>")
        return drawn[-1]

    tiny.build(tmp_path / "base", text=text, steps=2)

    assert len(drawn) == 2 * tiny.PRETRAIN_BATCH
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    assert model.config.num_hidden_layers == 2
    assert (tmp_path / "base" / "tokenizer_config.json").is_file()


def test_the_built_in_models_texts_are_plain_question_and_answer():
    text = tiny.qa_text(random.Random(0))
    assert text.startswith("Q: ") and "\nA: " in text and text.endswith("\n")


def test_build_makes_a_wider_and_deeper_base_when_asked(tmp_path):
    tiny.build(tmp_path / "base", steps=1, hidden_size=32, layers=3)

    config = AutoModelForCausalLM.from_pretrained(tmp_path / "base").config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 3, 2)
