"""Greedy, batched generation for the sweep's fixed sample of eval prompts, and its task
metrics (trainables/task_metrics.py): what a training loop calls at the steps
`generation.when` names.

Every worker answers the whole sample with the same inputs, so that sharded models
(ZeRO-3, FSDP), whose forward passes gather weights across the workers, run the same
number of forward passes on each; greedy decoding gives every worker the same answers.
"""

from __future__ import annotations

import json

import torch

from trainables.common import Workers, autocast, no_grad_for
from trainables.task_metrics import GENERATED_ANSWERS, GenerationSample, score_answers

__all__ = ["generate_answers", "task_metrics"]


def generate_answers(model, sample: GenerationSample, workers: Workers, precision: str = "fp32") -> list[str]:
    """`model`'s (a PeftModel or transformers model: one with `generate`) greedy answer to each prompt of `sample`, decoded, in the sample's
    order. Prompts go in batches of generation.batch_size, left-padded (the attention
    mask marks the padding, so a pad id that is also a real token is never attended to)."""
    spec, tokenizer = sample.spec, sample.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    answers: list[str] = []
    was_training = model.training
    model.eval()
    with no_grad_for(model):
        for start in range(0, len(sample.prompts), spec.batch_size):
            prompts = sample.prompts[start : start + spec.batch_size]
            width = max(len(p) for p in prompts)
            input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=workers.device)
            attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=workers.device)
            with autocast(workers, precision):
                output = model.generate(
                    input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=spec.max_new_tokens,
                    do_sample=False, pad_token_id=pad_id, eos_token_id=tokenizer.eos_token_id,
                )
            for row in output[:, width:].tolist():
                answers.append(tokenizer.decode(row, skip_special_tokens=True).strip())
    model.train(was_training)
    return answers


def task_metrics(model, sample: GenerationSample, workers: Workers, precision: str = "fp32") -> dict:
    """gen_<score> for the model's answers to `sample`, and the first
    generation.answers_logged of them (prompt, reference, answer) as JSON text under
    `generated_answers`."""
    answers = generate_answers(model, sample, workers, precision)
    metrics: dict = score_answers(sample.spec, answers, sample.references, sample.rows)
    shown = sample.spec.answers_logged
    if shown:
        metrics[GENERATED_ANSWERS] = json.dumps([
            {"prompt": sample.tokenizer.decode(p, skip_special_tokens=True), "reference": r, "answer": a}
            for p, r, a in list(zip(sample.prompts, sample.references, answers))[:shown]
        ])
    return metrics

