import copy
import json

import pytest

from trainables.errors import InputError
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
    with pytest.raises(InputError, match=r"^data.train: .*d.jsonl line 3: invalid JSON"):
        read_jsonl(path, "data.train")


def test_empty_file_and_wrong_fields(tmp_path, tokenizer):
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match=r"^data.eval: .*e.jsonl is empty"):
        read_jsonl(empty, "data.eval")
    wrong = tmp_path / "w.jsonl"
    wrong.write_text(json.dumps({"text": "a"}) + "\n")
    with pytest.raises(InputError, match=r"^data.train: .*w.jsonl line 1: expected 'messages' or 'prompt' and 'completion'"):
        tokenize_sft(wrong, tokenizer, 64, "data.train")


# ---------------------------------------------------------------- preference pairs (task dpo)

from sweeper.spec._load import validate_spec
from trainables.data import PreferenceSplit, TokenizedSplit, preference_example, tokenize_split  # noqa: E402
from tests.conftest import REPO, small_dpo_sweep, small_sweep  # noqa: E402

CHAT_PAIR = {
    "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Uppercase: ab"}],
    "chosen": [{"role": "assistant", "content": "AB"}],
    "rejected": [{"role": "assistant", "content": "ab"}],
}


def test_chat_pair_scores_only_the_answers(tokenizer):
    prompt, chosen, rejected = preference_example(CHAT_PAIR, tokenizer, 256, 128, "x")
    assert tokenizer.decode(prompt) == "<|system|>Be brief.<|end|><|user|>Uppercase: ab<|end|><|assistant|>"
    assert tokenizer.decode(chosen) == "AB<|end|>"
    assert tokenizer.decode(rejected) == "ab<|end|>"
    full = tokenizer.apply_chat_template(CHAT_PAIR["prompt"] + CHAT_PAIR["chosen"], tokenize=False)
    assert tokenizer.decode(prompt + chosen) == full


def test_plain_string_pair_gets_eos(tokenizer):
    prompt, chosen, rejected = preference_example(
        {"prompt": "Q: Add: 1+2\nA: ", "chosen": "3", "rejected": "4"}, tokenizer, 64, 32, "x"
    )
    assert tokenizer.decode(prompt) == "Q: Add: 1+2\nA: "
    assert (tokenizer.decode(chosen), tokenizer.decode(rejected)) == ("3<|end|>", "4<|end|>")


def test_long_prompt_keeps_its_end_and_answers_fit(tokenizer):
    record = {"prompt": "x" * 50 + "END", "chosen": "y" * 40, "rejected": "z"}
    prompt, chosen, rejected = preference_example(record, tokenizer, 32, 10, "x")
    assert len(prompt) == 10 and tokenizer.decode(prompt).endswith("END")
    assert len(prompt) + len(chosen) == 32
    assert tokenizer.decode(rejected) == "z<|end|>"


def test_preference_split_masks_the_prompt(tmp_path, tokenizer):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(CHAT_PAIR) + "\n" + json.dumps({"prompt": "p", "chosen": "c", "rejected": "r"}) + "\n")
    spec = validate_spec(small_dpo_sweep("x", data={"train": str(path), "eval": str(path)}), base_dir=REPO)
    split = tokenize_split(spec, "train", tokenizer)
    assert isinstance(split, PreferenceSplit) and len(split) == 2
    for side, answer in ((split.chosen, "AB<|end|>"), (split.rejected, "ab<|end|>")):
        assert targets(tokenizer, side.input_ids[0], side.labels[0]) == answer
    assert split.chosen.input_ids[1] == tokenizer("pc")["input_ids"] + [tokenizer.eos_token_id]
    assert targets(tokenizer, split.rejected.input_ids[1], split.rejected.labels[1]) == "r<|end|>"


def test_tokenize_split_follows_the_task(tokenizer):
    sft = validate_spec(small_sweep("x"), base_dir=REPO)
    assert isinstance(tokenize_split(sft, "eval", tokenizer), TokenizedSplit)
    dpo = validate_spec(small_dpo_sweep("x"), base_dir=REPO)
    pairs = tokenize_split(dpo, "eval", tokenizer)
    assert isinstance(pairs, PreferenceSplit) and len(pairs) == 200


CORRECT = {
    "Reverse": lambda word: word[::-1],
    "Uppercase": str.upper,
    "Add": lambda terms: str(sum(int(n) for n in terms.split("+"))),
    "Repeat twice": lambda word: f"{word} {word}",
    "First letter": lambda word: word[0],
}


@pytest.mark.parametrize("split", ["train", "eval"])
def test_shipped_pairs_are_correct_answer_against_near_miss(split):
    records = [record for _, record in read_jsonl(REPO / "data" / "preference" / f"{split}.jsonl", "data.train")]
    for record in records:
        kind, argument = record["prompt"][-1]["content"].split(": ", 1)
        (chosen,), (rejected,) = record["chosen"], record["rejected"]
        assert chosen["role"] == rejected["role"] == "assistant"
        assert chosen["content"] == CORRECT[kind](argument) != rejected["content"], record


@pytest.mark.parametrize(
    "record, message",
    [
        ({"prompt": "p", "chosen": "c"}, r"line 2: missing 'rejected'; a preference line needs 'prompt', 'chosen'"),
        ({"prompt": "p", "rejected": "r"}, r"line 2: missing 'chosen'"),
        ({"messages": []}, r"line 2: missing 'prompt', 'chosen', 'rejected'"),
        (
            {"prompt": "p", "chosen": [{"role": "assistant", "content": "c"}], "rejected": "r"},
            r"line 2: 'prompt', 'chosen' and 'rejected' must all be strings or all lists",
        ),
    ],
)
def test_bad_preference_line_names_key_file_and_line(tmp_path, tokenizer, record, message):
    path = tmp_path / "prefs.jsonl"
    path.write_text(json.dumps({"prompt": "p", "chosen": "c", "rejected": "r"}) + "\n" + json.dumps(record) + "\n")
    spec = validate_spec(small_dpo_sweep("x", data={"train": str(path)}), base_dir=REPO)
    with pytest.raises(InputError, match=r"^data.train: .*prefs.jsonl " + message):
        tokenize_split(spec, "train", tokenizer)


# ---------------------------------------------------------------- models and tokenizers


def test_tokenizer_that_cannot_load_is_a_keyed_input_error(tmp_path):
    from trainables.models import load_tokenizer

    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(InputError, match=rf"^model.name_or_path: cannot load a tokenizer from {tmp_path}: "):
        load_tokenizer(str(tmp_path))


def test_model_config_transformers_cannot_read_is_a_keyed_input_error(tmp_path):
    from trainables.models import check_model_config

    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(InputError, match=rf"^model.name_or_path: cannot load the model config of {tmp_path}: "):
        check_model_config(str(tmp_path))


def test_preparing_the_inputs_refuses_a_tokenizer_that_cannot_load(tmp_path):
    from sweeper.plan._inputs import prepare_inputs
    from sweeper.spec._load import validate_spec
    from tests.conftest import REPO, small_sweep

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    spec = validate_spec(small_sweep("x", model={"name_or_path": str(folder)}), base_dir=REPO)
    with pytest.raises(InputError, match=r"^model.name_or_path: cannot load a tokenizer from "):
        prepare_inputs(spec, tmp_path / "cache")


def test_chat_messages_with_a_tokenizer_without_chat_template_are_a_keyed_error(tokenizer):
    plain = copy.copy(tokenizer)
    plain.chat_template = None
    record = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    with pytest.raises(InputError, match=r"^data.train: f line 2: chat messages need the tokenizer's chat template"):
        sft_example(record, plain, 64, "data.train: f line 2")


def test_lora_target_modules_the_model_lacks_are_a_keyed_error(tmp_path):
    from transformers import LlamaConfig

    from trainables.models import check_target_modules

    LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=2, vocab_size=64).save_pretrained(tmp_path)
    source = str(tmp_path)
    check_target_modules(source, ["q_proj", "no_such_layer"])  # one match is enough, as for peft
    with pytest.raises(InputError, match=r"^lora.target_modules: none of c_attn, c_proj is a module of .*; its linear layers: .*q_proj"):
        check_target_modules(source, ["c_attn", "c_proj"])
