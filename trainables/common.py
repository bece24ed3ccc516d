"""Plain functions that the task modules (sft, dpo) share: distributed context, batching,
optimizer and schedule, and how a report leaves a worker. No training logic lives here;
how the model is spread over the workers and stepped is trainables/strategies.py."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TypeVar

import torch
import torch.distributed as dist

from trainables.data import IGNORE_INDEX

# report(metrics, checkpoint_dir): the trial session's report; elsewhere any recorder.
Reporter = Callable[[dict, "str | None"], None]
T = TypeVar("T")


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
    `gpus_per_worker` may share, or the CPU). Elsewhere (a one-worker trial's own process,
    where Ray made its GPUs the only visible ones; benchmarks): the current CUDA device.
    The CPU wherever no GPU is visible, as for a trial with `resources.use_gpu: false`
    (sweeper/run/_trial.py hides the node's GPUs from it)."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    try:
        import ray.train.torch

        return ray.train.torch.get_device()  # raises outside a Train worker
    except (ImportError, RuntimeError, DeprecationWarning):
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


@dataclass
class Batch:
    """One micro-batch on its device, and its counts taken on the CPU (no device sync).

    Padded: `input_ids` and `labels` are (rows, longest) with the rows on the left and
    `attention_mask` is 1 on each row's first `length` positions, whatever the tokens.
    Packed (padding-free): the rows laid end to end in packed rows, `position_ids`
    restarting at 0 at each row, no attention mask (transformers keeps attention within
    each row from the position ids), the first label of every row IGNORE_INDEX (no row
    predicts from the one before it), and `row_of` the row of each token (`num_rows` for
    the filler that evens out packed rows, a segment of its own that nothing learns)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor | None
    row_of: torch.Tensor | None
    num_rows: int
    tokens: int  # real tokens: the rows' lengths summed, padding left out
    targets: int  # tokens the loss is taken on (labels[:, 1:] != IGNORE_INDEX)

    def model_inputs(self) -> dict:
        """The forward's arguments: no key-value cache (only generation reads one, and with
        one transformers would not find the packed rows in the position ids)."""
        inputs = {"input_ids": self.input_ids, "use_cache": False}
        if self.attention_mask is not None:
            inputs["attention_mask"] = self.attention_mask
        if self.position_ids is not None:
            inputs["position_ids"] = self.position_ids
        return inputs

    def per_row(self, values: torch.Tensor) -> torch.Tensor:
        """Sums per row of `values` laid out as the shifted labels, labels[:, 1:]."""
        if self.row_of is None:
            return values.sum(dim=1)
        sums = torch.zeros(self.num_rows + 1, dtype=values.dtype, device=values.device)
        return sums.index_add(0, self.row_of[:, 1:].flatten(), values.flatten())[: self.num_rows]


# How data.packing lays a micro-batch out: rows packed into rows no longer than its longest
# (attention, computed whole over each packed row with sdpa or eager, never spans more than
# a padded row does), or all in one row (flash_attention_2 runs each packed row's sequences
# as sequences of their own, and reads them from the position ids of one row only).
PACKED_ROWS, ONE_ROW = "rows", "one_row"


def packing_layout(config) -> str | None:
    """The layout a trial's micro-batches take: None (padded) unless data.packing."""
    if not config.data.packing:
        return None
    return ONE_ROW if config.model.attn_implementation == "flash_attention_2" else PACKED_ROWS


def make_batch(
    input_rows: list[list[int]], label_rows: list[list[int]], pad_id: int, device: torch.device,
    packing: str | None = None,
) -> Batch:
    """A micro-batch of token rows and their labels, padded, or packed as `packing` says
    (PACKED_ROWS, ONE_ROW; see Batch)."""
    lengths = [len(row) for row in input_rows]
    if packing:
        input_ids, labels, position_ids, row_of = _packed(input_rows, label_rows, pad_id, packing)
        attention_mask = None
    else:
        input_ids, labels = pad_batch(input_rows, pad_id), pad_batch(label_rows, IGNORE_INDEX)
        width = input_ids.shape[1]
        attention_mask = (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
        position_ids = row_of = None
    targets = int((labels[:, 1:] != IGNORE_INDEX).sum())
    return Batch(
        to_device(input_ids, device), to_device(labels, device), to_device(attention_mask, device),
        to_device(position_ids, device), to_device(row_of, device), len(lengths), sum(lengths), targets,
    )


def _packed(input_rows, label_rows, pad_id: int, packing: str):
    """Packed rows (first fit, longest rows first, each at most the longest row long, or
    one), evened out with filler; their ids, labels, position ids and row of each token."""
    order = sorted(range(len(input_rows)), key=lambda i: -len(input_rows[i]))
    capacity = len(input_rows[order[0]]) if packing == PACKED_ROWS else sum(len(row) for row in input_rows)
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        fits = next((b for b, left in enumerate(room) if left >= len(input_rows[i])), None)
        if fits is None:
            bins.append([]), room.append(capacity)
            fits = len(bins) - 1
        bins[fits].append(i)
        room[fits] -= len(input_rows[i])
    width = capacity - min(room)
    ids, labels, positions, row_of = [], [], [], []
    for members, left in zip(bins, room):
        filler = left - (capacity - width)
        ids.append([t for i in members for t in input_rows[i]] + [pad_id] * filler)
        labels.append([t for i in members for t in (IGNORE_INDEX, *label_rows[i][1:])] + [IGNORE_INDEX] * filler)
        positions.append([p for i in members for p in range(len(input_rows[i]))] + list(range(filler)))
        row_of.append([i for i in members for _ in input_rows[i]] + [len(input_rows)] * filler)
    as_tensor = lambda rows: torch.tensor(rows, dtype=torch.long)  # noqa: E731
    return as_tensor(ids), as_tensor(labels), as_tensor(positions), as_tensor(row_of)


def to_device(tensor: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """A CPU tensor on `device`; to a GPU through pinned memory without waiting for the copy
    (a plain copy from pageable memory waits for the device)."""
    if tensor is None or device.type == "cpu":
        return tensor
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


# Micro-batches sorted by length together when data.group_by_length is set.
LENGTH_GROUP = 64


def endless_batches(
    num_examples: int, batch_size: int, workers: Workers, seed: int, skip: int = 0,
    lengths: list[int] | None = None,
) -> Iterator[list[int]]:
    """Example indices for this worker, reshuffled each epoch with a seeded generator so
    every worker sees a disjoint shard and the order depends on `seed` alone. `skip`
    drops the first batches (a resumed trial continues where it stopped). With the
    examples' `lengths` (data.group_by_length), each run of LENGTH_GROUP batches of that
    order is sorted by length, cut into batches, and those batches shuffled."""
    batches = _endless_batches(num_examples, batch_size, workers, seed, lengths)
    for _ in range(skip):
        next(batches)
    return batches


def _endless_batches(
    num_examples: int, batch_size: int, workers: Workers, seed: int, lengths: list[int] | None
) -> Iterator[list[int]]:
    epoch = 0
    while True:
        generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(num_examples, generator=generator).tolist()
        shard = order[workers.rank :: workers.world_size]
        usable = len(shard) - len(shard) % batch_size
        batches = [shard[start : start + batch_size] for start in range(0, usable, batch_size)]
        if lengths is not None:
            batches = _grouped_by_length(batches, lengths, batch_size, generator)
        yield from batches
        epoch += 1


def _grouped_by_length(
    batches: list[list[int]], lengths: list[int], batch_size: int, generator: torch.Generator
) -> list[list[int]]:
    grouped: list[list[int]] = []
    for start in range(0, len(batches), LENGTH_GROUP):
        group = sorted((i for batch in batches[start : start + LENGTH_GROUP] for i in batch), key=lambda i: -lengths[i])
        cut = [group[i : i + batch_size] for i in range(0, len(group), batch_size)]
        grouped += [cut[i] for i in torch.randperm(len(cut), generator=generator).tolist()]
    return grouped


def shard_batches(num_examples: int, batch_size: int, workers: Workers) -> list[list[int]]:
    """This worker's share of an evaluation split, in order."""
    shard = list(range(workers.rank, num_examples, workers.world_size))
    return [shard[i : i + batch_size] for i in range(0, len(shard), batch_size)]


def make_optimizer(model: torch.nn.Module, training) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters; torch's fused kernel where they are all plain
    CUDA tensors (one kernel per step instead of a loop of them; the same update)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    fused = bool(trainable) and all(p.is_cuda and type(p) in (torch.Tensor, torch.nn.Parameter) for p in trainable)
    return torch.optim.AdamW(
        trainable, lr=training.learning_rate, weight_decay=training.weight_decay, **({"fused": True} if fused else {})
    )


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


def fast_matmuls(workers: Workers, precision: str) -> None:
    """TF32 tensor cores for fp32 matrix products on CUDA (about 10 bits of mantissa in
    the products, fp32 accumulation); nothing on the CPU or in bf16/fp16."""
    if workers.device.type == "cuda" and precision == "fp32":
        torch.set_float32_matmul_precision("high")


def accumulating(model: torch.nn.Module, last: bool):
    """Context of one micro-batch's forward and backward: under DDP, every micro-batch of a
    step but the last skips the gradient all-reduce (`no_sync`), so a step all-reduces once."""
    if not last and isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def with_last(items: Iterable[T]) -> Iterator[tuple[T, bool]]:
    """Each item with whether it is the last (one item read ahead)."""
    iterator = iter(items)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True


def no_grad_for(model: torch.nn.Module):
    """Evaluation's context: `torch.inference_mode` (no autograd bookkeeping at all) for a
    plain or DDP model; `torch.no_grad` under FSDP and DeepSpeed, whose gathered weights
    must stay usable by the training steps after it."""
    from torch.distributed.fsdp import FSDPModule

    sharded = isinstance(model, FSDPModule) or type(model).__name__ == "DeepSpeedEngine"
    return torch.no_grad() if sharded else torch.inference_mode()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DDP or DeepSpeed wrapper (both keep it as `.module`)."""
    return getattr(model, "module", model)


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
    """Put back what save_random_state wrote for this rank; without it, the seeded streams stay."""
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


def step_loss(losses: list[torch.Tensor], step: int) -> float:
    """The mean of a step's micro-batch losses, read from the device once per step (not
    once per micro-batch: each read waits for the device); NonFiniteLossError, before the
    optimizer step is taken, where it is NaN or infinite."""
    mean = torch.stack([loss.detach().float() for loss in losses]).mean().item()
    if not math.isfinite(mean):
        raise NonFiniteLossError(f"loss is {mean} at step {step}; not training on it (lower training.learning_rate?)")
    return mean


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
