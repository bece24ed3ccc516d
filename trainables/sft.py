"""LoRA supervised fine-tuning: one trial's training loop, top to bottom.

Set up model, data, optimizer; then step, and at every `training.eval_every` steps
evaluate on the eval split and report eval loss, train loss, learning rate, tokens/s and
setup seconds with an adapter checkpoint. Loss is taken on completion / assistant tokens
only (labels are IGNORE_INDEX elsewhere, see trainables/data.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

import torch

from trainables.common import (
    Reporter,
    Throughput,
    autocast,
    backward_micro_batch,
    count_targets,
    current_workers,
    endless_batches,
    inject_fault,
    pad_batch,
    pad_token_id,
    report_with_checkpoint,
    resume,
    seed_everything,
    shard_batches,
    sum_across_workers,
)
from trainables.config import TrialConfig
from trainables.out_of_memory import MicroBatches
from trainables.preemption import NO_NOTICE, PreemptionNotice
from trainables.strategies import prepare
from trainables.data import IGNORE_INDEX, TokenizedSplit


def train(
    config: TrialConfig,
    data: dict[str, TokenizedSplit],
    model_source: str,
    report: Reporter,
    started_at: float,
    resume_from: str | None = None,
    memory_forecast_gib: float | None = None,
    preemption: PreemptionNotice = NO_NOTICE,
) -> None:
    """Fine-tune `model_source` with LoRA as `config` says, calling `report` at each evaluation.

    `config` is the trial's config, its sampled values applied; `data` holds the
    tokenized "train" and "eval" splits; `started_at` is when the trial started (time.time()),
    for the setup-seconds metric; `resume_from` is a checkpoint directory to continue from
    (a retried or resumed trial); `memory_forecast_gib` is the trial's memory forecast,
    for the reason of a trial that runs out of memory; `preemption` tells the workers
    when their node is being taken away (asked after every optimizer step).
    """
    training = config.training
    workers = current_workers()
    seed_everything(training.seed)

    # The model spread over the workers as resources.strategy says (DDP, ZeRO, FSDP).
    strategy = prepare(config, model_source, workers)
    model = strategy.model
    pad_id = pad_token_id(model)
    done_steps = resume(strategy, resume_from, workers) if resume_from else 0

    # Data: this worker's shard of the train split, reshuffled each epoch by seed, in
    # micro-batches that are halved once if they run out of memory.
    train_split, eval_split = data["train"], data["eval"]
    micro_batches = MicroBatches(config, strategy, workers, memory_forecast_gib)
    accumulation = training.gradient_accumulation_steps
    batches = endless_batches(
        len(train_split), training.per_device_batch_size, workers, training.seed, skip=done_steps * accumulation
    )

    setup_seconds = None
    throughput = Throughput()
    losses_since_report: list[float] = []
    for step in range(done_steps + 1, training.max_steps + 1):
        model.train()
        throughput.start()
        fault = inject_fault(config.chaos, step)
        step_batches = [next(batches) for _ in range(accumulation)]
        step_loss, step_tokens = micro_batches.run(
            step, step_batches, lambda parts: train_step(parts, strategy, train_split, pad_id, workers, training, fault, step)
        )
        learning_rate = strategy.step()
        throughput.stop(step_tokens)
        losses_since_report.append(step_loss)
        if setup_seconds is None:
            setup_seconds = time.time() - started_at

        if step % training.eval_every == 0 or step == training.max_steps:
            eval_loss = evaluate(model, eval_split, training, workers, pad_id, batch_size=micro_batches.size)
            tokens, seconds, cpu_seconds = throughput.take()
            train_loss_sum, count, tokens, seconds, cpu_seconds = sum_across_workers(
                sum(losses_since_report), len(losses_since_report), tokens, seconds, cpu_seconds
            )
            losses_since_report = []
            metrics = {
                "step": step,
                "eval_loss": eval_loss,
                "eval_perplexity": math.exp(min(eval_loss, 50.0)),
                "train_loss": train_loss_sum / count,
                "learning_rate": learning_rate,
                # seconds are summed over workers that ran in parallel: divide by world size
                "tokens_per_second": tokens / (seconds / workers.world_size),
                "train_tokens": tokens,
                "train_cpu_share": cpu_seconds / seconds,
                "setup_seconds": setup_seconds,
                **micro_batches.report(),
                **preemption.moves,
            }
            report_with_checkpoint(report, metrics, strategy, workers)
        if step < training.max_steps and preemption.arrived():
            # This node is being taken away: keep this step's work and move with it
            # (trainables/preemption.py).
            preemption.keep_and_wait(report, step, strategy, workers)


def train_step(
    parts: Iterable[list[int]], strategy, split: TokenizedSplit, pad_id: int, workers, training, fault: float, step: int
) -> tuple[float, int]:
    """Forward and backward of one optimizer step's micro-batches (`parts`, example
    indices): the step's mean loss and its tokens."""
    model = strategy.model
    losses: list[float] = []
    tokens = 0
    for indices in parts:
        input_ids = pad_batch([split.input_ids[i] for i in indices], pad_id).to(workers.device)
        labels = pad_batch([split.labels[i] for i in indices], IGNORE_INDEX).to(workers.device)
        with autocast(workers, training.precision):
            loss = model(input_ids=input_ids, attention_mask=input_ids != pad_id, labels=labels).loss * fault
        losses.append(backward_micro_batch(strategy, loss, step))
        tokens += int((input_ids != pad_id).sum())
    return sum(losses) / len(losses), tokens


@torch.no_grad()
def evaluate(model, split: TokenizedSplit, training, workers, pad_id: int, batch_size: int | None = None) -> float:
    """Mean loss per target token over the whole eval split (all workers together), in
    batches of `batch_size` (training.per_device_batch_size unless given)."""
    model.eval()
    loss_sum, target_count = 0.0, 0
    for indices in shard_batches(len(split), batch_size or training.per_device_batch_size, workers):
        input_ids = pad_batch([split.input_ids[i] for i in indices], pad_id).to(workers.device)
        labels = pad_batch([split.labels[i] for i in indices], IGNORE_INDEX).to(workers.device)
        with autocast(workers, training.precision):
            logits = model(input_ids=input_ids, attention_mask=input_ids != pad_id).logits
        loss_sum += torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        ).item()
        target_count += count_targets(labels)
    loss_sum, target_count = sum_across_workers(loss_sum, target_count)
    return loss_sum / target_count

