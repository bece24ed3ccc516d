"""Memory forecast of one trial, per GPU, before anything starts: the frozen weights by
quantization, the adapters with their gradients and AdamW states, the activations of one
micro-batch with and without gradient checkpointing, the logits of the loss, and what ZeRO
or FSDP partitions over the trial's workers. A sweep is forecast at the largest LoRA rank,
micro-batch and `data.max_length` its trials can sample. `sweep validate` and `sweep start` print it; a trial
that fits no GPU it could run on is refused with one keyed line naming what would fit.

The architecture comes from the model's config only (sweeper/cost/_architecture.py, the
same reader as the throughput model's). Pure arithmetic after that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sweeper.cost._architecture import Architecture, architecture_of
from sweeper.errors import UserError

__all__ = [
    "Architecture", "MemoryForecast", "forecast_trial_memory", "forecast", "GPU_MEMORY_GIB",
    "gpu_memory_gib", "cluster_accelerator_types", "trial_forecast_gib", "largest_settings", "LOGIT_BYTES", "unfit_problems", "refuse_if_unfit", "cluster_gpu_memory_gib", "check_before_launch",
    "GpuPacking", "gpu_packing", "with_gpu_packing", "launch_card_gib", "PACKING_MARGIN", "MOST_TRIALS_PER_GPU",
]

GIB = 1024**3

# Memory a process can allocate on the cards the price table knows (cost.accelerator), and
# on Ray's names for them: the card's total as torch reports it (what the CUDA driver leaves
# of the marketed size: an A10G or L4 "24 GB" card is 22 GiB, an L40S "48 GB" one 44.5).
GPU_MEMORY_GIB = {
    "rtx4090": 23.6, "a10g": 22.0, "l4": 22.0, "l40s": 44.5, "a100-40gb": 39.4, "a100-80gb": 79.1, "h100": 79.2,
    "h200": 139.8, "a10": 22.0, "a100": 39.4, "a100-40g": 39.4, "a100-80g": 79.1, "h100-80g": 79.2,
}

# What a CUDA process holds beyond its tensors (context, cuBLAS/NCCL workspaces) and the
# caching allocator's slack: a forecast fits a card when forecast * SLACK + CONTEXT fits.
CUDA_CONTEXT_GIB = 1.0
ALLOCATOR_SLACK = 1.1


@dataclass(frozen=True)
class MemoryForecast:
    """Bytes per GPU of one trial's worker at its peak (what torch.cuda.max_memory_allocated
    would show), by part."""

    weights: float
    adapter: float  # adapter weights, gradients and AdamW states
    activations: float  # kept for the backward pass (with checkpointing: each layer's input)
    logits: float  # at the loss
    what: str  # the trial in words: "8B in bf16, LoRA r=64, micro-batch 4 x 2048 ..."
    recomputed: float = 0.0  # with checkpointing: one layer's activations, recomputed after the loss

    @property
    def total(self) -> float:
        """The peak: the loss and the recomputation of a layer never coexist."""
        return self.weights + self.adapter + self.activations + max(self.logits, self.recomputed)

    @property
    def gib(self) -> float:
        return self.total / GIB

    def needs_gib(self) -> float:
        """What a card must have: the tensors plus CUDA context and allocator slack."""
        return self.gib * ALLOCATOR_SLACK + CUDA_CONTEXT_GIB

    def fits(self, card_gib: float) -> bool:
        return self.needs_gib() <= card_gib

    def describe(self) -> str:
        parts = ", ".join(
            f"{name} {value / GIB:.1f}"
            for name, value in (("weights", self.weights), ("adapter+optimizer", self.adapter),
                                ("activations", self.activations), ("logits", self.logits),
                                *((("recomputed layer", self.recomputed),) if self.recomputed else ()))
        )
        return f"Memory: about {self.gib:.1f} GiB per GPU ({self.what}; {parts} GiB)"


# Activation elements kept per token and layer for the backward pass, in units of the
# hidden width h, the MLP width i and the key/value width kv (bf16 or fp32 each): the two
# RMSNorms (input, fp32 upcast, output), q/k/v and their rotary copies, attention output,
# the SwiGLU MLP's gate, up, activation and product. LoRA dropout keeps a copy of the input
# of each adapted layer that reads the hidden width (down_proj's copy takes the place of
# the MLP's product, which is then not kept).
_PER_LAYER_H, _PER_LAYER_KV, _PER_LAYER_I = 11, 3, 4
_DROPOUT_H = 6
# Bytes per vocabulary entry of one token's logits at the loss: SFT through transformers'
# loss keeps the logits in the compute dtype, their fp32 upcast and the log-softmax, then
# its fp32 gradient (about 12); our DPO loss (trainables/dpo.py) also keeps the gathered
# log-probabilities' fp32 softmax for the policy's two answers (about 16).
LOGIT_BYTES = {"sft": 12, "dpo": 16}


def forecast(
    arch: Architecture, *, precision: str, quantization: str, lora_r: int, target_modules: list[str],
    lora_dropout: float, micro_batch: int, sequence: int, checkpointing: bool, strategy: str,
    zero_stage: int, offload_optimizer: bool, workers: int, task: str = "sft",
) -> MemoryForecast:
    """The per-GPU forecast of one worker (see MemoryForecast)."""
    compute_bytes = 2 if precision == "bf16" else 4  # fp16 keeps fp32 weights under autocast
    shards = workers if strategy == "fsdp" or (strategy == "deepspeed" and zero_stage == 3) else 1

    # Frozen weights: quantized linear layers (nf4 0.5 byte plus double-quantized block
    # constants; int8 1 byte); embeddings, head and norms stay unquantized, in fp32 after
    # peft's k-bit preparation, and autocast makes a bf16 copy of the fp32 head for its
    # matmul, there while the logits are.
    linear = arch.layers * arch.layer_linear_params
    rest = arch.params - linear
    head_copy = 0.0
    if quantization == "nf4":
        weights = linear * (0.5 + 0.127 / 8 + 4 / 64 / 8) + rest * 4
    elif quantization == "int8":
        weights = linear * (1 + 4 / 4096) + rest * 4
    else:
        weights = arch.params * compute_bytes / shards
    if quantization != "none" and precision != "fp32":
        head_copy = arch.vocab * arch.hidden * 2

    # Adapters: fp32 weights 4 + gradients 4 + AdamW moments 8 bytes a parameter (under
    # DeepSpeed bf16: bf16 weights and gradients, fp32 master copy and moments, the same
    # 16). ZeRO-1 partitions the 12 optimizer bytes, ZeRO-2 the gradients too, ZeRO-3 and
    # FSDP everything; offloading takes the optimizer bytes off the GPU.
    shapes = arch.linear_shapes()
    adapter_params = arch.layers * sum(lora_r * (a + b) for name, (a, b) in shapes.items() if name in target_modules)
    weight_b, grad_b, optimizer_b = 4.0, 4.0, 8.0
    if strategy == "deepspeed":
        optimizer_b = 0.0 if offload_optimizer else 12.0 / workers
        weight_b, grad_b = (2.0, 2.0) if precision == "bf16" else (4.0, 4.0)
        if zero_stage >= 2:
            grad_b /= workers
        if zero_stage == 3:
            weight_b /= workers
    elif strategy == "fsdp":
        weight_b, grad_b, optimizer_b = 4.0 / workers, 4.0 / workers, 8.0 / workers
    adapter = adapter_params * (weight_b + grad_b + optimizer_b)

    # Activations: DPO runs chosen and rejected answers in one batch.
    rows = micro_batch * (2 if task == "dpo" else 1)
    tokens = rows * sequence
    act_bytes = 2 if precision in ("bf16", "fp16") or quantization != "none" else 4
    per_layer = _PER_LAYER_H * arch.hidden + _PER_LAYER_KV * arch.kv_width + _PER_LAYER_I * arch.intermediate
    if lora_dropout > 0:
        per_layer += _DROPOUT_H * arch.hidden
    logits = tokens * arch.vocab * LOGIT_BYTES.get(task, LOGIT_BYTES["sft"]) + head_copy
    recomputed = 0.0
    if checkpointing:
        # Each layer's input is kept (in fp32 on a quantized base: peft's k-bit preparation
        # leaves the embeddings, and so the residual stream, in fp32), and one layer's
        # activations are recomputed at a time during the backward pass, when the logits
        # are gone: the peak is the larger of the two moments (MemoryForecast.total).
        residual_bytes = 4 if quantization != "none" else act_bytes
        activations = tokens * residual_bytes * arch.layers * arch.hidden
        recomputed = tokens * act_bytes * per_layer
    else:  # every layer's activations are kept until the loss, with the logits
        activations = tokens * act_bytes * arch.layers * per_layer

    size = f"{arch.params / 1e9:.1f}B" if arch.params >= 1e8 else f"{arch.params / 1e6:.1f}M"
    dtype = {"nf4": "nf4", "int8": "int8"}.get(quantization, precision)
    how = {"ddp": "", "fsdp": f", FSDP over {workers}"}.get(
        strategy, f", ZeRO-{zero_stage} over {workers}{' with optimizer offload' if offload_optimizer else ''}"
    )
    what = (
        f"{size} in {dtype}, LoRA r={lora_r}, micro-batch {rows} x {sequence} "
        f"{'with' if checkpointing else 'without'} gradient checkpointing{how}"
    )
    return MemoryForecast(weights, adapter, activations, logits, what, recomputed)


def forecast_trial_memory(spec, lora_r: int | None = None) -> MemoryForecast | None:
    """The forecast of a sweep's largest trial (`largest_settings`), or with `lora_r` given
    of the trial `spec` describes as it stands (a TrialConfig: its own sampled values);
    None when the model's config cannot be read."""
    arch = architecture_of(spec.model.name_or_path)
    if arch is None:
        return None
    return forecast(arch, **(_settings(spec, lora_r) if lora_r is not None else largest_settings(spec)))


def trial_forecast_gib(trial) -> float | None:
    """GiB of one trial's forecast (a TrialConfig: its own sampled rank and micro-batch),
    from a config known here or cached (a trial never waits on the hub); None without one."""
    arch = architecture_of(trial.model.name_or_path, from_hub=False)
    return forecast(arch, **_settings(trial, trial.lora.r)).gib if arch is not None else None


# The searched values that raise a trial's memory, by the forecast's setting they change
# (data.max_length is fixed for a sweep: the data is tokenized once, before any trial).
_MEMORY_PARAMETERS = {"lora.r": "lora_r", "training.per_device_batch_size": "micro_batch", "lora.dropout": "lora_dropout"}


def largest_settings(spec) -> dict:
    """The forecast's settings of the sweep's trial that needs the most memory: the largest
    LoRA rank, micro-batch and dropout its search can sample (its fixed values where a
    parameter is not searched), and no gradient checkpointing where the search can turn it
    off. Each raises the forecast on its own, so together they give its largest trial."""
    settings = _settings(spec, spec.lora.r)
    for path, dist in spec.search.parameters.items():
        if path in _MEMORY_PARAMETERS:
            values = getattr(dist, "values", None)
            largest = max(values) if values else dist.high
            settings[_MEMORY_PARAMETERS[path]] = int(largest) if path != "lora.dropout" else float(largest)
        elif path == "training.gradient_checkpointing" and False in (getattr(dist, "values", None) or []):
            settings["checkpointing"] = False
    return settings


def largest_rank(spec) -> int:
    """The largest lora.r a trial of the sweep can sample (its fixed rank if not searched)."""
    return largest_settings(spec)["lora_r"]


def _settings(spec, lora_r: int) -> dict:
    resources, training = spec.resources, spec.training
    return {
        "precision": training.precision,
        "quantization": spec.model.quantization,
        "lora_r": lora_r,
        "target_modules": list(spec.lora.target_modules),
        "lora_dropout": spec.lora.dropout,
        "micro_batch": training.per_device_batch_size,
        "sequence": spec.data.max_length,
        "checkpointing": training.gradient_checkpointing,
        "strategy": resources.strategy,
        "zero_stage": resources.deepspeed.effective_stage,
        "offload_optimizer": resources.deepspeed.effective_offload,
        "workers": resources.workers_per_trial,
        "task": spec.task,
    }


def gpu_memory_gib(accelerator: str | None) -> float | None:
    """Memory of a card by its price-table or Ray name (a10g, A100-80G, ...), or None."""
    return GPU_MEMORY_GIB.get((accelerator or "").lower())


def cluster_accelerator_types() -> set[str]:
    """The accelerator types (Ray's names: "H100", "A10G", ...) that the running Ray
    cluster's live nodes report."""
    import ray

    return {
        key.removeprefix("accelerator_type:")
        for node in ray.nodes() if node.get("Alive")
        for key in node["Resources"] if key.startswith("accelerator_type:")
    }


def cluster_gpu_memory_gib() -> float | None:
    """The memory of the largest GPU of the running Ray cluster, from the accelerator
    types Ray detected on its nodes; None when no node says."""
    sizes = [size for name in cluster_accelerator_types() if (size := gpu_memory_gib(name))]
    return max(sizes, default=None)


def unfit_problems(spec, card_gib: float | None) -> list[tuple[str, str]]:
    """A keyed problem (`resources`) when the trial does not fit a GPU of `card_gib`,
    naming what would make it fit. Nothing is checked for CPU trials or when the card or
    the model's config is unknown."""
    estimate = forecast_trial_memory(spec) if spec.resources.use_gpu and card_gib is not None else None
    if estimate is None or estimate.fits(card_gib):
        return []
    return [(
        "resources",
        f"a trial needs about {math.ceil(estimate.needs_gib())} GiB per GPU ({estimate.what}); "
        f"the largest GPU has {card_gib:g} GiB; {_what_would_fit(spec, card_gib)}",
    )]


def refuse_if_unfit(spec, card_gib: float | None) -> MemoryForecast | None:
    """The trial's forecast; raises UserError (`unfit_problems`) when it does not fit."""
    problems = unfit_problems(spec, card_gib)
    if problems:
        raise UserError(*(f"{key}: {message}" for key, message in problems))
    return forecast_trial_memory(spec)


def _what_would_fit(spec, card_gib: float) -> str:
    """The first single change (in this order) whose forecast fits, with its size."""
    arch = architecture_of(spec.model.name_or_path)
    settings = largest_settings(spec)
    workers = max(2, spec.resources.workers_per_trial)
    # Each a set of settings together, cheapest in speed first.
    candidates = [
        ("training.gradient_checkpointing: true", {"checkpointing": True}),
        ("model.quantization: nf4 with training.gradient_checkpointing: true",
         {"quantization": "nf4", "checkpointing": True, "strategy": "ddp"}),
        (f"resources.strategy: deepspeed with zero_stage 3 over {workers} workers and gradient checkpointing",
         {"strategy": "deepspeed", "zero_stage": 3, "workers": workers, "checkpointing": True}),
        ("model.quantization: nf4, gradient checkpointing and training.per_device_batch_size: 1 "
         "(raise gradient_accumulation_steps to keep the batch)",
         {"quantization": "nf4", "checkpointing": True, "strategy": "ddp", "micro_batch": 1}),
    ]
    fixes = []
    for text, change in candidates:
        if all(settings[key] == value for key, value in change.items()):
            continue
        estimate = forecast(arch, **{**settings, **change})
        if estimate.fits(card_gib):
            fixes.append(f"set {text} (about {math.ceil(estimate.needs_gib())} GiB)")
            if len(fixes) == 2:
                break
    if not fixes:
        return "no single setting fits it; use larger GPUs, or combine nf4, checkpointing and a smaller micro-batch"
    return " or ".join(fixes)


# resources.gpus_per_worker: auto leaves this share of a GPU's memory free, and packs
# at most this many trials on one GPU (beyond a few, packed trials only queue for its cores).
PACKING_MARGIN = 0.15
MOST_TRIALS_PER_GPU = 16


@dataclass(frozen=True)
class GpuPacking:
    """What `resources.gpus_per_worker: auto` came to on a card."""

    trials_per_gpu: int
    card_gib: float
    estimate: MemoryForecast

    @property
    def gpus_per_worker(self) -> float:
        return 1 / self.trials_per_gpu

    def describe(self) -> str:
        return (
            f"GPU packing (resources.gpus_per_worker: auto): {self.trials_per_gpu} trial(s) per {self.card_gib:g} GiB "
            f"GPU, gpus_per_worker {self.gpus_per_worker:.4g} (each needs about {self.estimate.needs_gib():.1f} GiB; "
            f"{PACKING_MARGIN:.0%} of the GPU left free)"
        )


def gpu_packing(spec, card_gib: float | None) -> GpuPacking:
    """The most one-worker trials whose forecasts (each with its CUDA context and the
    allocator's slack: `MemoryForecast.needs_gib`) fit a card of `card_gib` with
    PACKING_MARGIN of it left free, at most MOST_TRIALS_PER_GPU. Raises UserError keyed
    resources.gpus_per_worker where not even one fits, or the card or the model's config
    is unknown."""
    if card_gib is None:
        raise UserError(
            "resources.gpus_per_worker: auto needs the GPU's memory, but the cluster's nodes report no known "
            f"accelerator type and cost.accelerator names none; set cost.accelerator (one of "
            f"{', '.join(sorted(GPU_MEMORY_GIB))}) or a number"
        )
    estimate = forecast_trial_memory(spec)
    if estimate is None:
        raise UserError(
            f"resources.gpus_per_worker: auto needs the memory forecast, but the config of "
            f"{spec.model.name_or_path!r} cannot be read; set a number"
        )
    usable = card_gib * (1 - PACKING_MARGIN)
    trials = min(MOST_TRIALS_PER_GPU, math.floor(usable / estimate.needs_gib() + 1e-9))
    if trials < 1:
        raise UserError(
            f"resources.gpus_per_worker: auto: one trial needs about {math.ceil(estimate.needs_gib())} GiB "
            f"({estimate.what}), more than the {usable:.0f} GiB that a {card_gib:g} GiB GPU leaves with "
            f"{PACKING_MARGIN:.0%} free; {_what_would_fit(spec, usable)}"
        )
    return GpuPacking(trials, card_gib, estimate)


def with_gpu_packing(spec, card_gib: float | None):
    """`spec` with `resources.gpus_per_worker: auto` replaced by `gpu_packing`'s fraction
    for a card of `card_gib`, and the packing (None where the spec gives a number)."""
    if spec.resources.gpus_per_worker != "auto":
        return spec, None
    packing = gpu_packing(spec, card_gib)
    resources = spec.resources.model_copy(update={"gpus_per_worker": packing.gpus_per_worker})
    return spec.model_copy(update={"resources": resources}), packing


def launch_card_gib(spec) -> float | None:
    """The memory of the cluster's largest GPU (the accelerator types Ray detected), else
    of cost.accelerator's card. Needs Ray up."""
    return cluster_gpu_memory_gib() or gpu_memory_gib(spec.cost.accelerator)


def check_before_launch(spec, console) -> None:
    """At `sweep start`/`resume`, with Ray up: print the forecast of a GPU sweep and refuse
    it (UserError) when it fits no GPU of the cluster (the accelerator types Ray detected,
    else cost.accelerator's card)."""
    if not spec.resources.use_gpu:
        return
    card = launch_card_gib(spec)
    estimate = refuse_if_unfit(spec, card)
    if estimate is not None:
        fits = f"; fits the {card:g} GiB GPUs" if card else ""
        console.print(estimate.describe() + fits, highlight=False)
