"""LoRA supervised fine-tuning: one trial's training loop, top to bottom.

Set up model, data, optimizer; then step, and at every `training.eval_every` steps
evaluate on the eval split and report eval loss, train loss, learning rate, tokens/s and
setup seconds with an adapter checkpoint; where the sweep has a generation section, also
the task metrics of greedy answers to its fixed sample of eval prompts, at the steps
`generation.when` names. Loss is taken on completion / assistant tokens
only (labels are IGNORE_INDEX elsewhere, see trainables/data.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

import torch

from peft.helpers import disable_input_dtype_casting

from trainables.common import (
    Reporter,
    Throughput,
    accumulating,
    autocast,
    current_workers,
    endless_batches,
    fast_matmuls,
    inject_fault,
    make_batch,
    packing_layout,
    no_grad_for,
    report_with_checkpoint,
    resume,
    seed_everything,
    shard_batches,
    step_loss,
    sum_across_workers,
    with_last,
)
from trainables.config import TrialConfig
from trainables.out_of_memory import MicroBatches
from trainables.preemption import NO_NOTICE, PreemptionNotice
from trainables.strategies import prepare
from trainables.data import IGNORE_INDEX, TokenizedSplit, padding_id
from trainables.generation import task_metrics
from trainables.metrics import GENERATION_SECONDS


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
    fast_matmuls(workers, training.precision)

    # The model spread over the workers as resources.strategy says (DDP, ZeRO, FSDP).
    strategy = prepare(config, model_source, workers)
    model = strategy.model
    done_steps = resume(strategy, resume_from, workers) if resume_from else 0

    # Data: this worker's shard of the train split, reshuffled each epoch by seed (grouped
    # by length where data.group_by_length), in micro-batches that are halved once if they
    # run out of memory, padded or packed (data.packing).
    train_split, eval_split = data["train"], data["eval"]
    micro_batches = MicroBatches(config, strategy, workers, memory_forecast_gib)
    accumulation = training.gradient_accumulation_steps
    lengths = [len(row) for row in train_split.input_ids] if config.data.group_by_length else None
    batches = endless_batches(
        len(train_split), training.per_device_batch_size, workers, training.seed, skip=done_steps * accumulation,
        lengths=lengths,
    )
    packing = packing_layout(config)
    # The sweep's fixed sample of eval prompts, answered at the steps generation.when names
    # (trainables/task_metrics.py); None without a generation section.
    generation = data.get("generation")

    setup_seconds = first_step_seconds = None
    throughput = Throughput()
    losses_since_report: list[float] = []
    for step in range(done_steps + 1, training.max_steps + 1):
        model.train()
        throughput.start()
        fault = inject_fault(config.chaos, step)
        step_batches = [next(batches) for _ in range(accumulation)]
        step_loss, step_tokens = micro_batches.run(
            step, step_batches, lambda parts: train_step(parts, strategy, train_split, workers, training, fault, step, packing)
        )
        learning_rate = strategy.step()
        throughput.stop(step_tokens)
        losses_since_report.append(step_loss)
        if setup_seconds is None:
            setup_seconds = time.time() - started_at
            first_step_seconds = throughput.seconds  # nothing taken yet: the first step's own time

        if step % training.eval_every == 0 or step == training.max_steps:
            eval_loss = evaluate(model, eval_split, training, workers, batch_size=2 * micro_batches.size, packing=packing)
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
                "first_step_seconds": first_step_seconds,
                **micro_batches.report(),
                **preemption.moves,
            }
            if generation is not None and generation.due(step, training.max_steps):
                generating_from = time.time()
                metrics.update(task_metrics(strategy.peft_model, generation, workers, training.precision))
                metrics[GENERATION_SECONDS] = time.time() - generating_from
            report_with_checkpoint(report, metrics, strategy, workers)
        if step < training.max_steps and preemption.arrived():
            # This node is being taken away: keep this step's work and move with it
            # (trainables/preemption.py).
            preemption.keep_and_wait(report, step, strategy, workers)


def train_step(
    parts: Iterable[list[int]], strategy, split: TokenizedSplit, workers, training, fault: float, step: int,
    packing: str | None = None,
) -> tuple[float, int]:
    """Forward and backward of one optimizer step's micro-batches (`parts`, example
    indices): the step's mean loss and its real tokens (padding left out). The device is
    waited for once, for the step's loss, not per micro-batch."""
    model = strategy.model
    pad_id = padding_id(split)
    losses: list[torch.Tensor] = []
    tokens = 0
    # peft would copy each adapted layer's input to its fp32 adapter weights' dtype; under
    # autocast the adapter's matmuls run in bf16/fp16 either way.
    with disable_input_dtype_casting(strategy.peft_model, active=training.precision != "fp32"):
        for indices, last in with_last(parts):
            batch = make_batch(
                [split.input_ids[i] for i in indices], [split.labels[i] for i in indices], pad_id, workers.device, packing
            )
            with accumulating(model, last):
                with autocast(workers, training.precision):
                    loss = model(**batch.model_inputs(), labels=batch.labels).loss * fault
                strategy.backward(loss)
            losses.append(loss.detach())
            tokens += batch.tokens
    return step_loss(losses, step), tokens


def evaluate(
    model, split: TokenizedSplit, training, workers, batch_size: int | None = None, packing: str | None = None
) -> float:
    """Mean loss per target token over the whole eval split (all workers together), in
    batches of `batch_size` (training.per_device_batch_size unless given), without autograd.
    The logits are cast to fp32 one row at a time, so a batch twice the training
    micro-batch holds no more than a training step's fp32 logits."""
    model.eval()
    target_count = 0
    pad_id = padding_id(split)
    with no_grad_for(model):
        loss_sum = torch.zeros((), dtype=torch.float64, device=workers.device)
        for indices in shard_batches(len(split), batch_size or training.per_device_batch_size, workers):
            batch = make_batch(
                [split.input_ids[i] for i in indices], [split.labels[i] for i in indices], pad_id, workers.device, packing
            )
            with autocast(workers, training.precision):
                logits = model(**batch.model_inputs()).logits
            for row_logits, row_labels in zip(logits, batch.labels):
                loss_sum += torch.nn.functional.cross_entropy(
                    row_logits[:-1].float(), row_labels[1:], ignore_index=IGNORE_INDEX, reduction="sum"
                )
            target_count += batch.targets
        loss_sum = loss_sum.item()
    loss_sum, target_count = sum_across_workers(loss_sum, target_count)
    return loss_sum / target_count
