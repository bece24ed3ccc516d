"""Out of memory, handled (trainables/out_of_memory.py): a step that runs out is taken
again at half the micro-batch and twice the accumulation, once; the reasons of a trial
that cannot go on."""

from types import SimpleNamespace

import pytest
import torch

from trainables.common import Workers
from trainables.out_of_memory import MicroBatches, TrialOutOfMemory, halves, is_out_of_memory
from trainables.sections import ChaosSpec

CPU = Workers(0, 1, torch.device("cpu"))


def micro_batches(size=4, accumulation=2, *, chaos=ChaosSpec(), workers=CPU, strategy="ddp", forecast=1.25):
    model = torch.nn.Linear(2, 2)
    config = SimpleNamespace(
        training=SimpleNamespace(per_device_batch_size=size, gradient_accumulation_steps=accumulation),
        chaos=chaos,
        resources=SimpleNamespace(strategy=strategy),
    )
    trial_strategy = SimpleNamespace(model=model, micro_batches=accumulation)
    return MicroBatches(config, trial_strategy, workers, forecast), trial_strategy


def fits_up_to(largest: int):
    """A train_step whose micro-batches of more than `largest` examples run out of memory;
    it records the micro-batches it trained."""
    trained: list[list[int]] = []

    def train_step(parts):
        taken = []
        for part in parts:
            if len(part) > largest:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            taken.append(part)
        trained[:] = taken
        return len(taken)

    return train_step, trained


def test_a_step_that_runs_out_is_taken_again_at_half_with_the_same_examples():
    batching, strategy = micro_batches(size=4, accumulation=2)
    train_step, trained = fits_up_to(2)
    batches = [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert batching.run(3, batches, train_step) == 4
    assert trained == [[0, 1], [2, 3], [4, 5], [6, 7]]  # the same 8 examples in the step
    assert batching.size == 2 and strategy.micro_batches == 4  # backward scales by the new count
    assert batching.report() == {"out_of_memory_at_micro_batch": 4, "micro_batch": 2}
    # The next steps go on at half, without another failure.
    assert batching.run(4, [[8, 9, 10, 11], [12, 13, 14, 15]], train_step) == 4


def test_nothing_is_reported_while_the_micro_batch_fits():
    batching, strategy = micro_batches(size=4)
    train_step, trained = fits_up_to(4)
    batching.run(1, [[0, 1, 2, 3], [4, 5, 6, 7]], train_step)
    assert trained == [[0, 1, 2, 3], [4, 5, 6, 7]] and batching.report() == {} and strategy.micro_batches == 2


def test_an_odd_micro_batch_is_cut_into_two_parts():
    assert halves([0, 1, 2]) == [[0, 1], [2]]
    batching, _ = micro_batches(size=3, accumulation=1)
    train_step, trained = fits_up_to(2)
    batching.run(1, [[0, 1, 2]], train_step)
    assert trained == [[0, 1], [2]] and batching.size == 2


def test_running_out_again_at_half_fails_with_both_sizes_the_memory_and_the_forecast():
    batching, _ = micro_batches(size=8, forecast=12.34)
    train_step, _ = fits_up_to(2)
    with pytest.raises(TrialOutOfMemory) as failure:
        batching.run(3, [list(range(8)), list(range(8, 16))], train_step)
    reason = str(failure.value)
    assert reason.startswith("out of memory at micro-batch 8 and again at 4 (step 3): peak resident "), reason
    assert reason.endswith(" (CPU); forecast 12.3 GiB at micro-batch 8"), reason


def test_a_micro_batch_of_one_that_does_not_fit_fails_at_once():
    batching, _ = micro_batches(size=1, accumulation=1, forecast=None)
    train_step, _ = fits_up_to(0)
    with pytest.raises(TrialOutOfMemory, match=r"^out of memory at micro-batch 1 \(step 5\), which cannot be halved: .*; no forecast at micro-batch 1$"):
        batching.run(5, [[0]], train_step)


@pytest.mark.parametrize("workers, strategy", [(Workers(0, 2, torch.device("cpu")), "ddp"), (CPU, "deepspeed")])
def test_several_workers_or_deepspeed_fail_instead_of_halving(workers, strategy):
    batching, _ = micro_batches(size=4, workers=workers, strategy=strategy)
    train_step, _ = fits_up_to(2)
    with pytest.raises(TrialOutOfMemory, match="which cannot be halved in a trial of several workers or under deepspeed"):
        batching.run(1, [[0, 1, 2, 3], [4, 5, 6, 7]], train_step)


def test_other_errors_pass_through_untouched():
    batching, _ = micro_batches()

    def train_step(parts):
        list(parts)
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError, match="not a memory problem"):
        batching.run(1, [[0, 1, 2, 3]], train_step)
    assert batching.size == 4


def test_the_chaos_fault_runs_out_at_its_step_after_the_first_micro_batch_and_half_fits():
    batching, strategy = micro_batches(size=4, accumulation=2, chaos=ChaosSpec(fault="oom", at_step=2))
    weight = strategy.model.weight
    calls: list[list[list[int]]] = []
    clean_at_start: list[bool] = []

    def train_step(parts):
        clean_at_start.append(weight.grad is None)
        calls.append([])
        for part in parts:
            weight.grad = torch.ones_like(weight)  # a backward left gradients
            calls[-1].append(part)
        return len(calls[-1])

    batches = [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert batching.run(1, batches, train_step) == 2 and not batching.report()  # not its step
    weight.grad = None
    assert batching.run(2, batches, train_step) == 4
    # The failed attempt trained the first micro-batch, then ran out; its gradients were discarded.
    assert calls[1] == [[0, 1, 2, 3]] and calls[2] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert clean_at_start[1:] == [True, True]
    assert batching.report() == {"out_of_memory_at_micro_batch": 4, "micro_batch": 2}


def test_what_counts_as_out_of_memory():
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not is_out_of_memory(RuntimeError("expected scalar type Float"))
    assert not is_out_of_memory(ValueError("out of memory"))
