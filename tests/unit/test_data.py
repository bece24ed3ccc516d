import json

import pytest

from sweeper.errors import UserError
from trainables.data import IGNORE_INDEX, read_jsonl, sft_example, tokenize_sft
from trainables.tiny import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def targets(tokenizer, ids, labels):
    return tokenizer.decode([i for i, l in zip(ids, labels) if l != IGNORE_INDEX])


def test_prompt_completion_loss_only_on_completion(tokenizer):
    ids, labels = sft_example({"prompt": "Add: 1+2", "completion": "3"}, tokenizer, 64, "x")
    assert targets(tokenizer, ids, labels) == "3<|end|>"
    assert tokenizer.decode(ids) == "Add: 1+23<|end|>"


def test_chat_loss_only_on_assistant_turns(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Reverse: ab"},
        {"role": "assistant", "content": "ba"},
        {"role": "user", "content": "Uppercase: ab"},
        {"role": "assistant", "content": "AB"},
    ]
    ids, labels = sft_example({"messages": messages}, tokenizer, 256, "x")
    assert targets(tokenizer, ids, labels) == "ba<|end|>AB<|end|>"
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(messages, tokenize=False)


def test_truncation_keeps_length(tokenizer):
    ids, labels = sft_example({"prompt": "x" * 100, "completion": "y"}, tokenizer, 16, "x")
    assert len(ids) == len(labels) == 16


def test_malformed_jsonl_names_key_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n\n{not json\n")
    with pytest.raises(UserError, match=r"^data.train: .*d.jsonl line 3: invalid JSON"):
        read_jsonl(path, "data.train")


def test_empty_file_and_wrong_fields(tmp_path, tokenizer):
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(UserError, match=r"^data.eval: .*e.jsonl is empty"):
        read_jsonl(empty, "data.eval")
    wrong = tmp_path / "w.jsonl"
    wrong.write_text(json.dumps({"text": "a"}) + "\n")
    with pytest.raises(UserError, match=r"^data.train: .*w.jsonl line 1: expected 'messages' or 'prompt' and 'completion'"):
        tokenize_sft(wrong, tokenizer, 64, "data.train")
