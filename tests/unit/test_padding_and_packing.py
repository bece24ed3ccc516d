"""Padded and packed micro-batches on a model shaped like the chat models users sweep: a
tiny Llama built from a config (random weights) with a list of eos ids and no pad id (as
Llama-3.1-Instruct), and a tokenizer whose pad token is the eos that closes every chat
turn (as Qwen2.5-Instruct's `<|im_end|>`). Masks come from each row's length: the
turn-closing tokens are attended to and learned, and a padded or packed batch scores
each row as that row alone does."""

import json
import time

import pytest
import torch

from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_dpo_sweep, small_sweep
from trainables import dpo, sft
from trainables.common import ONE_ROW, PACKED_ROWS, Workers, make_batch
from trainables.data import IGNORE_INDEX, PreferenceSplit, TokenizedSplit, padding_id, tokenize_sft

CPU = Workers(0, 1, torch.device("cpu"))
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat_tokenizer():
    """Byte-level, built locally; pad = eos = `<|im_end|>`, which closes every turn."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|im_end|>", additional_special_tokens=SPECIALS
    )
    tokenizer.chat_template = QWEN_TEMPLATE
    return tokenizer


def list_eos_model(tokenizer):
    """A 2-layer Llama, random weights, eos_token_id a list and no pad id."""
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = tokenizer.convert_tokens_to_ids(SPECIALS)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=88, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False,
        eos_token_id=[ids[2], ids[0], ids[1]], pad_token_id=None, bos_token_id=None,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def chats(count: int) -> list[dict]:
    """Two-turn conversations of varied lengths."""
    return [
        {"messages": [
            {"role": "user", "content": "Sort: " + " ".join("cab"[j % 3] for j in range(1 + 3 * i))},
            {"role": "assistant", "content": "sorted " * (1 + i % 4)},
            {"role": "user", "content": "again" + "!" * i},
            {"role": "assistant", "content": "done"},
        ]}
        for i in range(count)
    ]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chat-model")
    tokenizer = chat_tokenizer()
    model = list_eos_model(tokenizer)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    path = folder / "chats.jsonl"
    path.write_text("".join(json.dumps(chat) + "\n" for chat in chats(12)))
    split = tokenize_sft(path, tokenizer, 256, "data.train")
    return tokenizer, model, split, folder


def row_mean_loss(model, split: TokenizedSplit, indices: list[int]) -> float:
    """Each row alone (no padding, no mask), the losses weighted by target tokens."""
    total = count = 0.0
    for i in indices:
        input_ids, labels = torch.tensor([split.input_ids[i]]), torch.tensor([split.labels[i]])
        targets = int((labels[:, 1:] != IGNORE_INDEX).sum())
        with torch.no_grad():
            total += float(model(input_ids=input_ids, labels=labels).loss) * targets
        count += targets
    return total / count


def test_the_pad_is_the_tokenizers_and_the_turn_closing_eos_stays_a_learned_token(setup):
    tokenizer, _, split, _ = setup
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert padding_id(split) == im_end
    for ids, labels in zip(split.input_ids, split.labels):
        closing = [p for p, token in enumerate(ids) if token == im_end]
        assert len(closing) == 4  # one per turn
        assert [labels[p] for p in closing[1::2]] == [im_end, im_end]  # the assistant turns' are learned
    batch = make_batch(split.input_ids[:4], split.labels[:4], im_end, CPU.device)
    for row, ids in enumerate(split.input_ids[:4]):
        assert batch.attention_mask[row, : len(ids)].all() and not batch.attention_mask[row, len(ids) :].any()
        assert (batch.input_ids[row, : len(ids)] == im_end).sum() == 4
    assert batch.tokens == sum(len(ids) for ids in split.input_ids[:4]) < batch.input_ids.numel()


def test_a_split_without_a_pad_token_pads_with_an_id_it_never_uses():
    split = TokenizedSplit([[0, 1, 3], [2, 5]], [[0, 1, 3], [2, 5]])
    assert padding_id(split) == 4
    assert split.rows([1]).pad_id == 4


LAYOUTS = pytest.mark.parametrize("packing", [None, PACKED_ROWS, ONE_ROW], ids=["padded", "packed", "one-row"])


@LAYOUTS
def test_a_batch_scores_each_row_as_that_row_alone(setup, packing):
    _, model, split, _ = setup
    indices = [0, 6, 11, 3]
    assert len({len(split.input_ids[i]) for i in indices}) == 4, [len(split.input_ids[i]) for i in indices]
    batch = make_batch([split.input_ids[i] for i in indices], [split.labels[i] for i in indices], padding_id(split),
                       CPU.device, packing)
    with torch.no_grad():
        loss = float(model(**batch.model_inputs(), labels=batch.labels).loss)
    assert loss == pytest.approx(row_mean_loss(model, split, indices), abs=1e-5)
    assert batch.targets == sum(sum(t != IGNORE_INDEX for t in split.labels[i][1:]) for i in indices)
    if packing == ONE_ROW:
        assert batch.input_ids.shape == (1, batch.tokens) and batch.attention_mask is None
    if packing == PACKED_ROWS:
        assert batch.input_ids.shape[1] == max(len(split.input_ids[i]) for i in indices)
        assert batch.attention_mask is None


def test_rows_pack_first_fit_into_rows_no_longer_than_the_longest_with_filler_of_their_own():
    rows = [list(range(100, 100 + n)) for n in (10, 3, 4, 6, 2)]
    batch = make_batch(rows, rows, 0, CPU.device, PACKED_ROWS)
    assert batch.input_ids.shape == (3, 10)  # [10], [6, 4], [3, 2] + 5 filler
    assert batch.position_ids[2].tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 4]
    assert batch.row_of[2].tolist() == [1, 1, 1, 4, 4, 5, 5, 5, 5, 5]  # 5: the filler, no row's
    assert batch.labels[2].tolist() == [IGNORE_INDEX, 101, 102, IGNORE_INDEX, 101] + [IGNORE_INDEX] * 5
    assert batch.tokens == 25 and batch.targets == 25 - 5
    # each row's shifted positions (a row's first, unless it opens its packed row: its label is ignored)
    assert batch.per_row(torch.ones(3, 9)).tolist() == [9, 2, 4, 5, 2]


@LAYOUTS
def test_dpo_sequence_log_probabilities_of_a_batch_are_each_rows_alone(setup, packing):
    _, model, split, _ = setup
    pairs = PreferenceSplit(split.rows([0, 7, 2]), split.rows([9, 1, 4]))
    batch = dpo.pair_batch(pairs, [0, 1, 2], CPU, packing)
    with torch.no_grad():
        together = dpo.sequence_logps(model, batch)
        alone = torch.cat([
            dpo.sequence_logps(model, make_batch([ids], [labels], 0, CPU.device))
            for rows in (pairs.chosen, pairs.rejected) for ids, labels in zip(rows.input_ids, rows.labels)
        ])
    lengths = dpo.answer_lengths(batch)
    assert lengths.tolist() == [sum(t != IGNORE_INDEX for t in labels[1:]) for rows in (pairs.chosen, pairs.rejected)
                                for labels in rows.labels]
    # per answer token (the sums run over up to a hundred tokens of about -5 each)
    torch.testing.assert_close(together / lengths, alone / lengths, atol=1e-5, rtol=0)


def test_a_trial_trains_the_list_eos_model_padded_and_packed_to_the_same_losses(setup):
    """The whole SFT loop (LoRA, accumulation, evaluation) on the model whose config has
    no pad id and a list of eos ids; packing changes no loss and counts the same tokens."""
    _, _, split, folder = setup
    data = {"train": split, "eval": split.rows(list(range(6)))}
    raw = small_sweep(
        "chat", model={"name_or_path": str(folder / "model")},
        training={"max_steps": 3, "eval_every": 1, "per_device_batch_size": 3, "gradient_accumulation_steps": 2},
        early_stopping={"scheduler": "none"}, lora={"dropout": 0.0},  # dropout draws per padded or packed shape
    )
    runs = {}
    for packing in (False, True):
        spec = validate_spec({**raw, "data": {**raw["data"], "packing": packing}}, base_dir=REPO)
        reports = []
        sft.train(spec.trial_config(), data, str(folder / "model"), lambda m, c: reports.append(m), time.time())
        runs[packing] = reports
    padded, packed = runs[False], runs[True]
    assert [r["step"] for r in padded] == [1, 2, 3]
    for one, other in zip(padded, packed):
        assert other["train_loss"] == pytest.approx(one["train_loss"], abs=1e-4)
        assert other["eval_loss"] == pytest.approx(one["eval_loss"], abs=1e-4)
        assert other["train_tokens"] == one["train_tokens"]
    assert padded[0]["eval_loss"] != padded[-1]["eval_loss"]  # it trained
    rows_per_step = 3 * 2
    assert padded[0]["train_tokens"] < rows_per_step * max(len(ids) for ids in split.input_ids)


def test_a_dpo_trial_trains_the_list_eos_model_padded_and_packed_to_the_same_losses(setup):
    """The whole DPO loop (reference and policy, rewards, evaluation) on the same model:
    packing changes no loss nor reward and counts the same tokens."""
    _, _, split, folder = setup
    pairs = PreferenceSplit(split.rows([0, 2, 4, 6, 8, 10]), split.rows([1, 3, 5, 7, 9, 11]))
    data = {"train": pairs, "eval": pairs.rows([0, 1, 2, 3])}
    raw = small_dpo_sweep(
        "chat-dpo", model={"name_or_path": str(folder / "model")},
        training={"max_steps": 2, "eval_every": 1, "per_device_batch_size": 2, "gradient_accumulation_steps": 2,
                  "learning_rate": 1e-2},
        early_stopping={"scheduler": "none"},
    )
    runs = {}
    for packing in (False, True):
        spec = validate_spec({**raw, "data": {**raw["data"], "max_length": 256, "packing": packing}}, base_dir=REPO)
        reports = []
        dpo.train(spec.trial_config(), data, str(folder / "model"), lambda m, c: reports.append(m), time.time())
        runs[packing] = reports
    for one, other in zip(runs[False], runs[True], strict=True):
        for key in ("train_loss", "eval_loss", "eval_rewards_chosen", "eval_rewards_rejected"):
            assert other[key] == pytest.approx(one[key], abs=1e-4), key
        assert other["train_tokens"] == one["train_tokens"]
    assert runs[False][-1]["eval_rewards_margin"] != 0  # it trained
