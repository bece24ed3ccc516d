"""The SFT step as it runs now (masks from lengths, one device read per step, no fp32 copy
of adapted inputs, evaluation under inference_mode at twice the micro-batch) against the
step written out as it ran before those changes (masks from `input_ids != pad_id`, the
loss read after every micro-batch, evaluation under no_grad at the micro-batch): the same
seed gives the same train and eval losses. And the batching it relies on."""

import time

import pytest
import torch
import torch.distributed as dist

from sweeper.spec._load import validate_spec
from tests.conftest import REPO, small_sweep
from trainables import sft
from trainables.common import (
    LENGTH_GROUP,
    Workers,
    accumulating,
    autocast,
    current_workers,
    endless_batches,
    pad_batch,
    seed_everything,
    shard_batches,
    with_last,
)
from trainables.data import IGNORE_INDEX, tokenize_sft
from trainables.models import BUILTIN_TINY_MODEL, load_tokenizer, resolve_model_source
from trainables.strategies import prepare


@pytest.fixture(scope="module")
def setup():
    source = resolve_model_source(BUILTIN_TINY_MODEL)
    tokenizer = load_tokenizer(source)
    spec = validate_spec(small_sweep("step"), base_dir=REPO)
    train = tokenize_sft(spec.data.train, tokenizer, 96, "data.train").rows(list(range(64)))
    evaluation = tokenize_sft(spec.data.eval, tokenizer, 96, "data.eval").rows(list(range(20)))
    return source, {"train": train, "eval": evaluation}


def previous_step(trial, data, source) -> list[tuple[float, float]]:
    """(train loss, eval loss) per step, as the step was written before."""
    training = trial.training
    workers = current_workers()
    seed_everything(training.seed)
    strategy = prepare(trial, source, workers)
    model = strategy.model
    pad_id = model.config.pad_token_id
    batches = endless_batches(len(data["train"]), training.per_device_batch_size, workers, training.seed)
    split = data["train"]
    results = []
    for _ in range(training.max_steps):
        model.train()
        losses = []
        for _ in range(training.gradient_accumulation_steps):
            indices = next(batches)
            input_ids = pad_batch([split.input_ids[i] for i in indices], pad_id)
            labels = pad_batch([split.labels[i] for i in indices], IGNORE_INDEX)
            with autocast(workers, training.precision):
                loss = model(input_ids=input_ids, attention_mask=input_ids != pad_id, labels=labels).loss
            assert torch.isfinite(loss)
            strategy.backward(loss)
            losses.append(loss.item())
        strategy.step()
        results.append((sum(losses) / len(losses), previous_evaluate(model, data["eval"], training, workers, pad_id)))
    return results


@torch.no_grad()
def previous_evaluate(model, split, training, workers, pad_id) -> float:
    model.eval()
    loss_sum, target_count = 0.0, 0
    for indices in shard_batches(len(split), training.per_device_batch_size, workers):
        input_ids = pad_batch([split.input_ids[i] for i in indices], pad_id)
        labels = pad_batch([split.labels[i] for i in indices], IGNORE_INDEX)
        with autocast(workers, training.precision):
            logits = model(input_ids=input_ids, attention_mask=input_ids != pad_id).logits
        loss_sum += torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        ).item()
        target_count += int((labels[:, 1:] != IGNORE_INDEX).sum())
    return loss_sum / target_count


# bf16 without LoRA dropout: with it, dropout now runs on the bf16 input where it ran on
# its fp32 copy, and its outputs differ by up to one bf16 rounding step (a loss about 3e-4
# apart, relative: bf16's own precision).
@pytest.mark.parametrize("precision, dropout", [("fp32", 0.05), ("bf16", 0.0)])
def test_the_step_keeps_the_losses_of_the_step_before(setup, precision, dropout):
    source, data = setup
    raw = small_sweep(
        "step", training={"max_steps": 3, "eval_every": 1, "per_device_batch_size": 4,
                          "gradient_accumulation_steps": 2, "precision": precision},
        early_stopping={"scheduler": "none"}, lora={"dropout": dropout},
    )
    trial = validate_spec(raw, base_dir=REPO).trial_config()
    reports = []
    sft.train(trial, data, source, lambda metrics, checkpoint: reports.append(metrics), time.time())
    before = previous_step(trial, data, source)
    now = [(r["train_loss"], r["eval_loss"]) for r in reports]
    assert len(now) == len(before) == 3
    tolerance = 1e-4 if precision == "fp32" else 1e-3  # bf16: the rows batched two micro-batches at a time in eval
    for (train_now, eval_now), (train_before, eval_before) in zip(now, before):
        assert train_now == pytest.approx(train_before, abs=1e-4)
        assert eval_now == pytest.approx(eval_before, abs=tolerance)
    assert before[0][0] != before[-1][0]  # it trained


def test_length_grouped_batches_hold_each_example_once_an_epoch_in_runs_of_similar_length():
    lengths = [(i * 37) % 101 + 1 for i in range(4 * LENGTH_GROUP * 2)]
    worker = Workers(0, 1, torch.device("cpu"))
    epoch = len(lengths) // 4
    grouped = endless_batches(len(lengths), 4, worker, seed=3, lengths=lengths)
    batches = [next(grouped) for _ in range(epoch)]
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / epoch
    plain = endless_batches(len(lengths), 4, worker, seed=3)
    plain_spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in (next(plain) for _ in range(epoch))) / epoch
    assert spread < plain_spread / 10
    again = endless_batches(len(lengths), 4, worker, seed=3, lengths=lengths, skip=5)
    assert next(again) == batches[5]  # a resumed trial continues the same order


def test_with_last_marks_only_the_last_item():
    assert list(with_last(iter([1, 2, 3]))) == [(1, False), (2, False), (3, True)]
    assert list(with_last([])) == []


def test_accumulated_micro_batches_skip_ddps_all_reduce_but_the_last(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
        with accumulating(model, last=False):
            assert not model.require_backward_grad_sync
        with accumulating(model, last=True):
            assert model.require_backward_grad_sync
    finally:
        dist.destroy_process_group()
