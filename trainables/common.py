"""Plain functions that the task modules (sft, dpo) share: distributed context, batching,
optimizer and schedule, and how a report leaves a worker. No training logic lives here;
how the model is spread over the workers and stepped is trainables/strategies.py."""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from trainables.data import IGNORE_INDEX

# report(metrics, checkpoint_dir): inside Ray it is ray.train.report; in a plain process
# (benchmarks, tests) any callable that records the metrics.
Reporter = Callable[[dict, "str | None"], None]


@dataclass(frozen=True)
class Workers:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def current_workers() -> Workers:
    """Rank, world size and device of this process (`this_device`)."""
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    return Workers(rank, world, this_device())


def this_device() -> torch.device:
    """Where this process trains. In a Ray Train worker: the device Ray Train assigned it
    (`ray.train.torch.get_device()`: its own GPU, which several trials with a fractional
    `gpus_per_worker` may share, or the CPU). Elsewhere (benchmarks, tests): the current
    CUDA device. The CPU wherever no GPU is visible, as in the workers of a trial with
    `resources.use_gpu: false` (sweeper/run/trial.py hides the node's GPUs from them)."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    try:
        import ray.train.torch

        return ray.train.torch.get_device()  # raises outside a Ray Train worker
    except (ImportError, RuntimeError):
        return torch.device("cuda", torch.cuda.current_device())


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def sum_across_workers(*values: float) -> list[float]:
    """Sum scalars over all workers (all-reduce); identity in a lone process."""
    tensor = torch.tensor(values, dtype=torch.float64)
    if dist.is_available() and dist.is_initialized():
        backend_device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        tensor = tensor.to(backend_device)
        dist.all_reduce(tensor)
    return tensor.cpu().tolist()


def pad_batch(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    width = max(len(row) for row in rows)
    return torch.tensor([row + [pad_id] * (width - len(row)) for row in rows], dtype=torch.long)


def endless_batches(
    num_examples: int, batch_size: int, workers: Workers, seed: int, skip: int = 0
) -> Iterator[list[int]]:
    """Example indices for this worker, reshuffled each epoch with a seeded generator so
    every worker sees a disjoint shard and the order depends on `seed` alone. `skip`
    drops the first batches (a resumed trial continues where it stopped)."""
    batches = _endless_batches(num_examples, batch_size, workers, seed)
    for _ in range(skip):
        next(batches)
    return batches


def _endless_batches(num_examples: int, batch_size: int, workers: Workers, seed: int) -> Iterator[list[int]]:
    epoch = 0
    while True:
        generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(num_examples, generator=generator).tolist()
        shard = order[workers.rank :: workers.world_size]
        for start in range(0, len(shard) - batch_size + 1, batch_size):
            yield shard[start : start + batch_size]
        epoch += 1


def shard_batches(num_examples: int, batch_size: int, workers: Workers) -> list[list[int]]:
    """This worker's share of an evaluation split, in order."""
    shard = list(range(workers.rank, num_examples, workers.world_size))
    return [shard[i : i + batch_size] for i in range(0, len(shard), batch_size)]


def make_optimizer(model: torch.nn.Module, training) -> torch.optim.Optimizer:
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(trainable, lr=training.learning_rate, weight_decay=training.weight_decay)


def make_schedule(optimizer: torch.optim.Optimizer, training) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over warmup_ratio x max_steps, then cosine, linear or constant."""
    warmup = int(round(training.warmup_ratio * training.max_steps))
    decay_steps = max(1, training.max_steps - warmup)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min(1.0, (step - warmup) / decay_steps)
        if training.lr_scheduler == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        if training.lr_scheduler == "linear":
            return 1.0 - progress
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def autocast(workers: Workers, precision: str):
    """Mixed precision context for bf16/fp16; a no-op for fp32."""
    if precision == "fp32":
        return torch.autocast(workers.device.type, enabled=False)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(workers.device.type, dtype=dtype)


def count_targets(labels: torch.Tensor) -> int:
    return int((labels[:, 1:] != IGNORE_INDEX).sum())


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DDP or DeepSpeed wrapper (both keep it as `.module`)."""
    return getattr(model, "module", model)


def pad_token_id(model: torch.nn.Module) -> int:
    config = unwrap(model).config
    return config.pad_token_id if config.pad_token_id is not None else config.eos_token_id


# The report a checkpoint was taken with, to report again (see final_report_of).
REPORT_FILE = "report.json"


def report_with_checkpoint(report: Reporter, metrics: dict, strategy, workers: Workers) -> None:
    """Every worker reports the same metrics with its part of a checkpoint (the strategy
    decides who writes what: the adapter, which promotion registers, and the optimizer,
    schedule and step, which a retried or resumed trial continues from; every worker
    writes its random state)."""
    with tempfile.TemporaryDirectory(prefix="sweeper-checkpoint-") as checkpoint_dir:
        strategy.save(checkpoint_dir, metrics["step"])
        save_random_state(checkpoint_dir, workers)
        if workers.is_main:
            with open(os.path.join(checkpoint_dir, REPORT_FILE), "w") as file:
                json.dump(metrics, file)
        report(metrics, checkpoint_dir)


def resume(strategy, checkpoint_dir: str, workers: Workers) -> int:
    """Continue from a checkpoint: the strategy's adapter, optimizer and schedule, then
    this worker's random state; the step it was taken at."""
    done_steps = strategy.restore(checkpoint_dir)
    restore_random_state(checkpoint_dir, workers)
    return done_steps


# Each worker's random state, one file per rank, inside a checkpoint folder.
RANDOM_STATE_FOLDER = "random_state"


def save_random_state(checkpoint_dir: str, workers: Workers) -> None:
    """This worker's random streams as they stand after the step just taken. LoRA's
    dropout draws from torch's stream: a trial paused at a rung (or retried, or resumed)
    and continued from this checkpoint must draw what an uninterrupted run would, or the
    same config ends differently depending on where it was paused."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if workers.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(workers.device)
    folder = os.path.join(checkpoint_dir, RANDOM_STATE_FOLDER)
    os.makedirs(folder, exist_ok=True)
    torch.save(state, os.path.join(folder, f"rank-{workers.rank}.pt"))


def restore_random_state(checkpoint_dir: str, workers: Workers) -> None:
    """Put back what save_random_state wrote for this rank. A checkpoint without it (written
    by an older sweeper, or by a run of another world size) keeps the seeded streams."""
    path = os.path.join(checkpoint_dir, RANDOM_STATE_FOLDER, f"rank-{workers.rank}.pt")
    if not os.path.isfile(path):
        return
    state = torch.load(path, weights_only=False)
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and workers.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], workers.device)


def checkpoint_report(checkpoint_dir: str) -> dict | None:
    """The report a checkpoint was taken with; None for a checkpoint without one."""
    path = os.path.join(checkpoint_dir, REPORT_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as file:
        return json.load(file)


def final_report_of(checkpoint_dir: str, max_steps: int) -> dict | None:
    """The last report of a run whose checkpoint is at max_steps already: the run trained
    to its end, but the driver that ran it died before it recorded that report (so a
    resumed sweep restarts it with nothing left to train). None otherwise."""
    metrics = checkpoint_report(checkpoint_dir)
    return metrics if metrics is not None and metrics.get("step", 0) >= max_steps else None


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite: the step is not taken and the trial stops."""


def check_finite(loss: torch.Tensor, step: int) -> None:
    if not torch.isfinite(loss):
        raise NonFiniteLossError(f"loss is {loss.item()} at step {step}; not training on it (lower training.learning_rate?)")


def backward_micro_batch(strategy, loss: torch.Tensor, step: int) -> float:
    """Backpropagate one micro-batch's loss once it is known finite (the strategy scales it
    for accumulation); its value."""
    check_finite(loss, step)
    strategy.backward(loss)
    return loss.item()


def inject_fault(chaos, step: int) -> float:
    """Apply config.chaos at its step: raise, kill this worker process, or return a loss
    factor of NaN. Returns 1.0 (no fault) otherwise; `oom` is raised by the step's
    micro-batches (trainables/out_of_memory.py)."""
    if chaos.fault in ("none", "oom") or step != chaos.at_step:
        return 1.0
    if chaos.fault == "exception":
        raise RuntimeError(f"chaos.fault: injected exception at step {step}")
    if chaos.fault == "kill_worker":
        os.kill(os.getpid(), 9)
    return float("nan")


class Throughput:
    """Tokens per second of training between two reports (evaluation time excluded), and
    the CPU time of the training thread in those seconds: a share well below 1 on a CPU
    run means the thread waited (for cores taken by other processes, or for the GIL)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self._started: float | None = None
        self._cpu_started: float | None = None

    def start(self) -> None:
        self._started = time.perf_counter()
        self._cpu_started = time.thread_time()

    def stop(self, tokens: int) -> None:
        self.seconds += time.perf_counter() - self._started
        self.cpu_seconds += time.thread_time() - self._cpu_started
        self.tokens += tokens

    def take(self) -> tuple[int, float, float]:
        taken = self.tokens, self.seconds, self.cpu_seconds
        self.tokens, self.seconds, self.cpu_seconds = 0, 0.0, 0.0
        return taken
