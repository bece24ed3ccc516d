"""Out of accelerator memory, handled: the most common failure of GPU sweeps is a trial
whose micro-batch does not fit. When one of a step's micro-batches runs out of memory,
the step is taken again with every micro-batch cut in two halves (half the micro-batch,
twice the gradient accumulation: the same examples per optimizer step, so the same
experiment), and the trial goes on at that size; its reports say so
(`out_of_memory_at_micro_batch`, `micro_batch`). Once only: a trial that runs out again
at half, or whose micro-batch is 1 already, fails with the memory it reached and its
forecast in the reason.

Halving is done for one-worker trials under ddp or fsdp: a worker of a several-worker
trial that stops mid-step leaves the others waiting in a collective (Ray Train ends the
run instead), and DeepSpeed counts its accumulation inside its engine.

`chaos.fault: oom` fakes it on any machine: at `chaos.at_step`, the step's last
micro-batch of `training.per_device_batch_size` examples raises torch's
OutOfMemoryError when the step's loop reaches it (the loop reads one micro-batch ahead, so
by then all but the one before it were backpropagated; the gradients they left are
discarded as after a real one); half of it fits.
"""

from __future__ import annotations

import gc
import math
import resource
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from trainables.metrics import MICRO_BATCH, OUT_OF_MEMORY_AT_MICRO_BATCH

__all__ = ["TrialOutOfMemory", "MicroBatches", "is_out_of_memory", "halves"]

T = TypeVar("T")
GIB = 1024**3


class TrialOutOfMemory(RuntimeError):
    """A trial's micro-batch does not fit, not even at half (or it was 1 already)."""


def is_out_of_memory(error: BaseException) -> bool:
    """torch's OutOfMemoryError, or an allocation failure a CUDA library reports as a
    RuntimeError ("CUDA out of memory", cuBLAS's "CUBLAS_STATUS_ALLOC_FAILED")."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in text or "ALLOC_FAILED" in text)


def halves(batch: list[int]) -> list[list[int]]:
    """A micro-batch cut in two (the first half one longer when its size is odd)."""
    middle = math.ceil(len(batch) / 2)
    return [batch[:middle], batch[middle:]]


class MicroBatches:
    """The micro-batches a trial trains each step at: `training.per_device_batch_size`
    examples, or half that once a step ran out of memory."""

    def __init__(self, config, strategy, workers, memory_forecast_gib: float | None):
        self.configured = config.training.per_device_batch_size
        self.size = self.configured
        self.chaos = config.chaos
        self.strategy = strategy
        self.device = workers.device
        self.forecast_gib = memory_forecast_gib
        self.can_halve = workers.world_size == 1 and config.resources.strategy in ("ddp", "fsdp")

    @property
    def halved(self) -> bool:
        return self.size != self.configured

    def run(self, step: int, batches: list[list[int]], train_step: Callable[[Iterator[list[int]]], T]) -> T:
        """`train_step(micro_batches)` over the step's `batches` (each of
        `per_device_batch_size` examples); taken again at half the micro-batch when it
        runs out of memory, once. Raises TrialOutOfMemory when that is not possible or
        runs out too."""
        while True:
            try:
                return train_step(self._split(step, batches))
            except Exception as error:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
                if not is_out_of_memory(error):
                    raise
                failed_at = self.size
            # Out of the except block: the traceback, and the activations its frames held, are gone.
            self._free_memory()
            if self.halved or not self.can_halve or self.size == 1:
                raise TrialOutOfMemory(self._reason(step, failed_at))
            self.size = math.ceil(self.size / 2)
            self.strategy.micro_batches *= 2

    def report(self) -> dict[str, int]:
        """What the trial's reports carry once the micro-batch was halved."""
        return {OUT_OF_MEMORY_AT_MICRO_BATCH: self.configured, MICRO_BATCH: self.size} if self.halved else {}

    def _split(self, step: int, batches: list[list[int]]) -> Iterator[list[int]]:
        parts = [part for batch in batches for part in (halves(batch) if self.halved else [batch])]
        for number, part in enumerate(parts, start=1):
            if number == len(parts) and self._chaos_at(step, part):
                raise torch.OutOfMemoryError(f"chaos.fault: injected out of memory at step {step}, micro-batch {len(part)}")
            yield part

    def _chaos_at(self, step: int, part: list[int]) -> bool:
        return self.chaos.fault == "oom" and step == self.chaos.at_step and len(part) == self.configured

    def _free_memory(self) -> None:
        """Gradients of the micro-batches the failed step had taken, and the allocator's cache."""
        self.strategy.model.zero_grad(set_to_none=True)
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _reason(self, step: int, failed_at: int) -> str:
        sizes = f"{self.configured} and again at {failed_at}" if self.halved else f"{failed_at}"
        why = "" if self.halved else (
            ", which cannot be halved" + ("" if self.size == 1 else " in a trial of several workers or under deepspeed")
        )
        forecast = f"forecast {_size(self.forecast_gib)}" if self.forecast_gib is not None else "no forecast"
        return (
            f"out of memory at micro-batch {sizes} (step {step}){why}: {self._peak()}; "
            f"{forecast} at micro-batch {self.configured}"
        )

    def _peak(self) -> str:
        if self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory / GIB
            return f"peak {_size(torch.cuda.max_memory_allocated(self.device) / GIB)} allocated of {_size(total)}"
        return f"peak resident {_size(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2)} (CPU)"


def _size(gib: float) -> str:
    return f"{gib:.1f} GiB" if gib >= 1 else f"{gib * 1024:.0f} MiB"
