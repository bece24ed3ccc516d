"""LoRA direct preference optimization (DPO): one trial's training loop, top to bottom.

Set up model, data, optimizer; then step, and at every `training.eval_every` steps
evaluate on the eval split and report eval loss, the rewards of chosen and rejected
answers, their margin and the reward accuracy, with an adapter checkpoint.

The reference model is the same base with its adapters disabled (peft's
`disable_adapter()`), so no second copy of the weights is held. A model given as an SFT
adapter directory is merged into its base first (trainables/models.py), and that merged
model is both the start of the policy and the reference.

The loss is trl's (DPOTrainer, trl 1.16) for the variants in `dpo.loss_type`, written out
in `dpo_loss` because trl keeps it inside its trainer; tests/integration/test_dpo.py
checks loss and rewards against trl's DPOTrainer on the same pairs. Our own loop, not
trl's trainer, so that a DPO trial reads and steps like an SFT trial: same optimizer,
schedule, data order, reports and checkpoints, and the data tokenized once on the driver.
trl is not imported here: it pulls in the whole HF Trainer stack, seconds of every
trial's setup.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from peft.helpers import disable_input_dtype_casting

from trainables.common import (
    Batch,
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
    unwrap,
    with_last,
)
from trainables.config import TrialConfig
from trainables.out_of_memory import MicroBatches
from trainables.preemption import NO_NOTICE, PreemptionNotice
from trainables.strategies import prepare
from trainables.data import IGNORE_INDEX, PreferenceSplit, padding_id


def train(
    config: TrialConfig,
    data: dict[str, PreferenceSplit],
    model_source: str,
    report: Reporter,
    started_at: float,
    resume_from: str | None = None,
    memory_forecast_gib: float | None = None,
    preemption: PreemptionNotice = NO_NOTICE,
) -> None:
    """DPO-train fresh LoRA adapters on `model_source` as `config` says, calling `report` at
    each evaluation. Arguments as in trainables/sft.py::train; `data` holds preference pairs."""
    training = config.training
    workers = current_workers()
    seed_everything(training.seed)
    fast_matmuls(workers, training.precision)

    # The model spread over the workers as resources.strategy says (DDP, ZeRO, FSDP);
    # with the adapters disabled the same module is the reference.
    strategy = prepare(config, model_source, workers)
    model = strategy.model
    packing = packing_layout(config)

    # The reference never changes, so the eval pairs are scored under it once, here
    # (before any adapter weights are restored: disabled adapters are the reference anyway).
    train_split, eval_split = data["train"], data["eval"]
    eval_reference = reference_logps(model, eval_split, training, workers, packing)

    done_steps = resume(strategy, resume_from, workers) if resume_from else 0

    # Data: this worker's shard of the train pairs, reshuffled each epoch by seed (grouped
    # by length where data.group_by_length), in micro-batches that are halved once if they
    # run out of memory, padded or packed (data.packing).
    micro_batches = MicroBatches(config, strategy, workers, memory_forecast_gib)
    accumulation = training.gradient_accumulation_steps
    lengths = (
        [len(c) + len(r) for c, r in zip(train_split.chosen.input_ids, train_split.rejected.input_ids)]
        if config.data.group_by_length else None
    )
    batches = endless_batches(
        len(train_split), training.per_device_batch_size, workers, training.seed, skip=done_steps * accumulation,
        lengths=lengths,
    )

    setup_seconds = first_step_seconds = None
    throughput = Throughput()
    losses_since_report: list[float] = []
    for step in range(done_steps + 1, training.max_steps + 1):
        model.train()
        throughput.start()
        fault = inject_fault(config.chaos, step)
        step_batches = [next(batches) for _ in range(accumulation)]
        step_loss, step_tokens = micro_batches.run(
            step, step_batches, lambda parts: train_step(parts, strategy, train_split, workers, config, fault, step)
        )
        learning_rate = strategy.step()
        throughput.stop(step_tokens)
        losses_since_report.append(step_loss)
        if setup_seconds is None:
            setup_seconds = time.time() - started_at
            first_step_seconds = throughput.seconds  # nothing taken yet: the first step's own time

        if step % training.eval_every == 0 or step == training.max_steps:
            eval_metrics = evaluate(model, eval_split, eval_reference, config, workers)
            tokens, seconds, cpu_seconds = throughput.take()
            train_loss_sum, count, tokens, seconds, cpu_seconds = sum_across_workers(
                sum(losses_since_report), len(losses_since_report), tokens, seconds, cpu_seconds
            )
            losses_since_report = []
            metrics = {
                "step": step,
                **eval_metrics,
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
            report_with_checkpoint(report, metrics, strategy, workers)
        if step < training.max_steps and preemption.arrived():
            # This node is being taken away: keep this step's work and move with it
            # (trainables/preemption.py).
            preemption.keep_and_wait(report, step, strategy, workers)


def train_step(
    parts: Iterable[list[int]], strategy, split: PreferenceSplit, workers, config: TrialConfig, fault: float, step: int,
) -> tuple[float, int]:
    """Forward (reference and policy) and backward of one optimizer step's micro-batches
    of pairs (`parts`, pair indices): the step's mean loss and its real tokens (padding
    left out). The device is waited for once, for the step's loss."""
    model, peft_model = strategy.model, strategy.peft_model
    losses: list[torch.Tensor] = []
    tokens = 0
    # No fp32 copy of each adapted layer's input under autocast (see trainables/sft.py).
    with disable_input_dtype_casting(peft_model, active=config.training.precision != "fp32"):
        for indices, last in with_last(parts):
            batch = pair_batch(split, indices, workers, packing_layout(config))
            with accumulating(model, last):
                with autocast(workers, config.training.precision):
                    with torch.no_grad(), peft_model.disable_adapter():
                        reference = sequence_logps(peft_model, batch)
                    policy = sequence_logps(model, batch)
                    loss = dpo_loss(policy, reference, answer_lengths(batch), config.dpo).losses.mean() * fault
                strategy.backward(loss)
            losses.append(loss.detach())
            tokens += batch.tokens
    return step_loss(losses, step), tokens


def pair_batch(split: PreferenceSplit, indices: list[int], workers, packing: str | None = None) -> Batch:
    """One micro-batch, padded or packed: the chosen answers of `indices`, then their
    rejected answers."""
    rows = [split.chosen.input_ids[i] for i in indices] + [split.rejected.input_ids[i] for i in indices]
    targets = [split.chosen.labels[i] for i in indices] + [split.rejected.labels[i] for i in indices]
    return make_batch(rows, targets, padding_id(split.chosen), workers.device, packing)


def sequence_logps(model, batch: Batch) -> torch.Tensor:
    """Sum of the log-probabilities of each row's answer tokens (labels != IGNORE_INDEX)."""
    logits = model(**batch.model_inputs()).logits[:, :-1].float()
    targets = batch.labels[:, 1:]
    mask = targets != IGNORE_INDEX
    picked = logits.gather(-1, targets.masked_fill(~mask, 0).unsqueeze(-1)).squeeze(-1)
    return batch.per_row((picked - logits.logsumexp(dim=-1)) * mask)


def answer_lengths(batch: Batch) -> torch.Tensor:
    """Answer tokens of each row, at least 1."""
    return batch.per_row((batch.labels[:, 1:] != IGNORE_INDEX).long()).clamp(min=1)


@dataclass
class PairScores:
    losses: torch.Tensor  # per pair
    chosen_rewards: torch.Tensor  # beta x (policy - reference) log-ratio of the chosen answer
    rejected_rewards: torch.Tensor


def dpo_loss(policy: torch.Tensor, reference: torch.Tensor, lengths: torch.Tensor, dpo) -> PairScores:
    """trl's DPO loss per pair. `policy`, `reference` and `lengths` hold the chosen rows
    then the rejected rows (as `pair_batch` lays them out)."""
    chosen_ratio, rejected_ratio = (policy - reference).chunk(2)
    beta = dpo.beta
    if dpo.loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * (chosen_ratio - rejected_ratio))
    elif dpo.loss_type == "hinge":
        losses = torch.relu(1 - beta * (chosen_ratio - rejected_ratio))
    else:  # ipo: log-ratios averaged per answer token, regressed to 1 / (2 beta)
        chosen_length, rejected_length = lengths.chunk(2)
        losses = (chosen_ratio / chosen_length - rejected_ratio / rejected_length - 1 / (2 * beta)) ** 2
    return PairScores(losses, beta * chosen_ratio.detach(), beta * rejected_ratio.detach())


def reference_logps(model, split: PreferenceSplit, training, workers, packing: str | None = None) -> list[torch.Tensor]:
    """Reference log-probabilities of this worker's eval batches (adapters disabled)."""
    model.eval()
    scores = []
    with no_grad_for(model), unwrap(model).disable_adapter():
        for indices in shard_batches(len(split), training.per_device_batch_size, workers):
            batch = pair_batch(split, indices, workers, packing)
            with autocast(workers, training.precision):
                scores.append(sequence_logps(unwrap(model), batch))
    return scores


def evaluate(model, split: PreferenceSplit, reference: list[torch.Tensor], config: TrialConfig, workers) -> dict:
    """Mean DPO loss and rewards over the whole eval split (all workers together).
    Reward accuracy is the share of pairs whose chosen reward is strictly higher, as trl
    counts it: before any training policy equals reference, every reward is 0 and it is 0."""
    model.eval()
    totals = []
    batches = shard_batches(len(split), config.training.per_device_batch_size, workers)
    with no_grad_for(model):
        for indices, reference_scores in zip(batches, reference, strict=True):
            batch = pair_batch(split, indices, workers, packing_layout(config))
            with autocast(workers, config.training.precision):
                policy = sequence_logps(model, batch)
            scores = dpo_loss(policy, reference_scores, answer_lengths(batch), config.dpo)
            sums = (scores.losses, scores.chosen_rewards, scores.rejected_rewards, scores.chosen_rewards > scores.rejected_rewards)
            totals.append(torch.stack([values.double().sum() for values in sums]))
        # Read from the device once, after the last batch.
        loss_sum, chosen_sum, rejected_sum, correct = torch.stack(totals).sum(dim=0).tolist() if totals else [0.0] * 4
    count = sum(len(indices) for indices in batches)
    loss_sum, chosen_sum, rejected_sum, correct, count = sum_across_workers(
        loss_sum, chosen_sum, rejected_sum, correct, count
    )
    return {
        "eval_loss": loss_sum / count,
        "eval_rewards_chosen": chosen_sum / count,
        "eval_rewards_rejected": rejected_sum / count,
        "eval_rewards_margin": (chosen_sum - rejected_sum) / count,
        "eval_rewards_accuracy": correct / count,
    }

