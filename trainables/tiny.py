"""The built-in tiny model: a 2-layer Llama and a byte-level tokenizer, created locally
with no download, then briefly pretrained (full weights, a few seconds on one core) on
plain "Q: ... A: ..." text of the task family. A random base cannot be steered by LoRA
(its frozen output head yields near-uniform logits); a pretrained one can, and the chat
format of the SFT data is still new to it, so fine-tuning shows a real landscape.
Fixed seed and one thread: the same weights on every machine of the same build."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

VERSION = 1
SEED = 0
PRETRAIN_STEPS = 400
PRETRAIN_BATCH = 32
PRETRAIN_LR = 3e-3

SPECIAL_TOKENS = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# Byte-level: every byte is a token, and the special tokens after them.
VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)


def shape(hidden_size: int = 64, layers: int = 2) -> dict:
    """The model's shape as its config.json says it (the defaults: the built-in model), for
    `build` and for the cost model, which reads it without building anything: 16
    dimensions per attention head, an MLP 2.75x the hidden size, an untied head."""
    return {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 11 // 4,
        "num_hidden_layers": layers,
        "num_attention_heads": hidden_size // 16,
        "num_key_value_heads": hidden_size // 16,
        "tie_word_embeddings": False,
    }


def build_tokenizer():
    """Byte-level tokenizer: every text is representable, nothing is trained."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<|pad|>",
        eos_token="<|end|>",
        additional_special_tokens=SPECIAL_TOKENS[2:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def qa_text(rng: random.Random) -> str:
    """One pretraining text: a task of the shipped family in plain "Q: ... A: ..." form."""
    from trainables.toy_tasks import make_task

    prompt, answer, _ = make_task(rng)
    return f"Q: {prompt}\nA: {answer}\n"


def build(
    target: Path,
    text: Callable[[random.Random], str] = qa_text,
    steps: int = PRETRAIN_STEPS,
    hidden_size: int = 64,
    layers: int = 2,
) -> None:
    """Write config, weights and tokenizer of the tiny model to `target`, pretrained for
    `steps` on texts drawn by `text` (the defaults make the built-in model; benchmarks
    build bases of their own, with other texts or wider and deeper: 16 dimensions per
    attention head, an MLP 2.75x the hidden size: `shape`)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        **shape(hidden_size, layers),
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    _pretrain(model, tokenizer, text, steps)
    target = Path(target)
    partial = target.with_name(target.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target)


def _pretrain(model, tokenizer, text: Callable[[random.Random], str], steps: int) -> None:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rng = random.Random(f"pretrain-{SEED}")
        optimizer = torch.optim.AdamW(model.parameters(), lr=PRETRAIN_LR)
        model.train()
        for _ in range(steps):
            texts = [text(rng) for _ in range(PRETRAIN_BATCH)]
            batch = tokenizer(texts, padding=True, return_tensors="pt")
            labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
            loss = model(**batch, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    model.eval()
