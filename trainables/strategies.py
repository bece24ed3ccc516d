"""How a trial's workers share its model and step it (`resources.strategy`): DDP (every
worker holds the whole model), DeepSpeed ZeRO (optimizer states, gradients and, at stage
3, weights partitioned over the workers) or FSDP2 (everything sharded). The training
loops (sft, dpo) see one small interface, `Strategy`, so each loop reads the same under
every strategy:

    strategy = prepare(config, model_source, workers)
    done_steps = resume(strategy, resume_from, workers) if resume_from else 0  # + random state
    ... strategy.model(...) ...; strategy.backward(loss)   # per micro-batch
    learning_rate = strategy.step()                        # per optimizer step
    strategy.save(checkpoint_dir, step)                    # collective: every worker calls it

A checkpoint folder always holds the LoRA adapter as peft saves it (gathered from the
shards under ZeRO-3 and FSDP: what promotion registers) and `report.json`; beside them
each strategy keeps what it resumes from (its optimizer state, schedule and step). Under
DeepSpeed every worker writes its own optimizer partition into the folder it reports, and
Ray Train merges the folders of one report into one checkpoint.
"""

from __future__ import annotations

import contextlib
import os
from typing import Protocol

import torch

from trainables.common import make_optimizer, make_schedule
from trainables.config import TrialConfig
from trainables.models import add_lora, empty_base_model, load_base_model, prepare_for_training

__all__ = ["Strategy", "prepare", "adapt", "deepspeed_config", "TRAINING_STATE_FILE", "DEEPSPEED_TAG"]

TRAINING_STATE_FILE = "training_state.pt"
# The folder DeepSpeed writes its checkpoint into, inside a trial's checkpoint folder.
DEEPSPEED_TAG = "deepspeed"


class Strategy(Protocol):
    model: torch.nn.Module  # what the loop calls forward on (wrapped for the strategy)
    peft_model: torch.nn.Module  # the PeftModel inside (disable_adapter for DPO's reference)
    # Micro-batches per optimizer step, which backward scales by: ddp and fsdp only
    # (doubled when a trial goes on at half the micro-batch, trainables/out_of_memory.py).
    micro_batches: int

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's mean loss (scaled for accumulation here)."""

    def step(self) -> float:
        """Clip, optimizer step, clear gradients, advance the schedule; the learning rate used."""

    def save(self, checkpoint_dir: str, step: int) -> None:
        """Write this worker's part of a checkpoint at `step` into `checkpoint_dir` (every
        worker calls it: gathering is collective)."""

    def restore(self, checkpoint_dir: str) -> int:
        """Load adapter, optimizer and schedule from a checkpoint folder; its step."""


def prepare(config: TrialConfig, model_source: str, workers) -> Strategy:
    """The trial's model (base frozen, quantized if asked, fresh seeded adapters) wrapped
    for `config.resources.strategy`, with its optimizer and schedule. Under FSDP and
    ZeRO-3 no worker builds the whole model on its device: each holds its own shards from
    the start (FsdpStrategy, DeepSpeedStrategy)."""
    strategy = config.resources.strategy
    if strategy == "deepspeed":
        return DeepSpeedStrategy(config, model_source, workers)
    if strategy == "fsdp":
        return FsdpStrategy(config, model_source, workers)
    return DdpStrategy(config, adapted_base(config, model_source, workers.device), workers)


def adapted_base(config: TrialConfig, model_source: str, device: torch.device) -> torch.nn.Module:
    """The base weights frozen (and quantized, and checkpointed, as configured) with fresh
    LoRA adapters; on the CPU unless quantized (bitsandbytes loads onto `device`). Loading
    the base draws nothing from the random state, so the adapters' seeded values are the
    same whichever way (whole, or partitioned at creation under ZeRO-3) it was built."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        model = load_base_model(
            model_source,
            config.training.precision,
            quantization=config.model.quantization,
            attn_implementation=config.model.attn_implementation,
            device=device,
        )
    return adapt(model, config)


def adapt(base: torch.nn.Module, config: TrialConfig, on_meta: bool = False) -> torch.nn.Module:
    """`base` made ready for training as `config` asks (k-bit preparation, checkpointing),
    with fresh LoRA adapters, its forward compiled where `training.compile` is set.
    `on_meta`: `base` is on the meta device, and so are the adapters (built without
    drawing from the random state: their values come from elsewhere)."""
    with torch.random.fork_rng(devices=[]) if on_meta else contextlib.nullcontext(), \
            torch.device("meta") if on_meta else contextlib.nullcontext():
        model = add_lora(
            prepare_for_training(base, config.model.quantization, config.training.gradient_checkpointing), config.lora
        )
    if config.training.compile:
        # In place (nn.Module.compile), not torch.compile(model): the module stays peft's,
        # so its save_pretrained and state dict keys (no `_orig_mod.` prefix) are unchanged.
        model.compile()
    return model


def _take_random_state_of_rank0() -> None:
    """Every worker goes on from rank 0's CPU random state: the one each worker would have
    after drawing the seeded adapters itself, as under DDP (only rank 0 drew them here)."""
    state = [torch.get_rng_state()]
    torch.distributed.broadcast_object_list(state, src=0)
    torch.set_rng_state(state[0])


def _finish_step(optimizer, schedule) -> float:
    """Clear the gradients and move the schedule on; returns the learning rate the step used."""
    optimizer.zero_grad(set_to_none=True)
    learning_rate = schedule.get_last_lr()[0]
    schedule.step()
    return learning_rate


# ---------------------------------------------------------------- DDP


class DdpStrategy:
    """Every worker holds the whole model; gradients are averaged by DDP's all-reduce."""

    def __init__(self, config: TrialConfig, model: torch.nn.Module, workers):
        training = config.training
        self.workers = workers
        self.training = training
        if config.model.quantization == "none":
            model = model.to(workers.device)
        self.peft_model = model
        self.model = torch.nn.parallel.DistributedDataParallel(model) if workers.world_size > 1 else model
        self.optimizer = make_optimizer(model, training)
        self.schedule = make_schedule(self.optimizer, training)
        # fp16 needs a loss scaler; bf16 and fp32 do not.
        self.scaler = torch.amp.GradScaler(enabled=training.precision == "fp16")
        self.micro_batches = training.gradient_accumulation_steps

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss / self.micro_batches).backward()

    def step(self) -> float:
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.training.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return _finish_step(self.optimizer, self.schedule)

    def save(self, checkpoint_dir: str, step: int) -> None:
        if not self.workers.is_main:
            return
        self.peft_model.save_pretrained(checkpoint_dir)
        state = {"step": step, "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict()}
        torch.save(state, os.path.join(checkpoint_dir, TRAINING_STATE_FILE))

    def restore(self, checkpoint_dir: str) -> int:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        adapter = load_file(os.path.join(checkpoint_dir, "adapter_model.safetensors"))
        set_peft_model_state_dict(self.peft_model, adapter)
        state = torch.load(os.path.join(checkpoint_dir, TRAINING_STATE_FILE), weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        return int(state["step"])


# ---------------------------------------------------------------- DeepSpeed


def deepspeed_config(config: TrialConfig) -> dict:
    """The DeepSpeed config of a trial: the user's own (resources.deepspeed.config) or
    ours from zero_stage and offload_optimizer, with batch size, accumulation, clipping
    and precision from training.* filled in where it leaves them out or says 'auto'."""
    training, settings = config.training, config.resources.deepspeed
    zero = {"stage": settings.zero_stage}
    if settings.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    ours = {
        "train_micro_batch_size_per_gpu": training.per_device_batch_size,
        "gradient_accumulation_steps": training.gradient_accumulation_steps,
        "gradient_clipping": training.max_grad_norm,
        "bf16": {"enabled": training.precision == "bf16"},
        "fp16": {"enabled": training.precision == "fp16"},
        "zero_optimization": zero,
        # Our AdamW over the adapters, also with the optimizer offloaded (DeepSpeed's
        # CPUAdam would need its C++ op built on every node).
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
    }
    merged = dict(settings.config or {})
    for key, value in ours.items():
        if merged.get(key, "auto") == "auto":
            merged[key] = value
    # DeepSpeed checks that these three agree; the trial's world size decides it.
    merged.pop("train_batch_size", None)
    return merged


class DeepSpeedStrategy:
    """DeepSpeed's engine over the trial's process group (NCCL on GPUs, gloo on CPUs). At
    ZeRO-3 the base is loaded inside DeepSpeed's `zero.Init` (transformers does so while a
    `HfDeepSpeedConfig` is alive): each parameter is partitioned as it is created, and
    rank 0 reads the weights into the partitions one module at a time."""

    def __init__(self, config: TrialConfig, model_source: str, workers):
        import deepspeed

        self.workers = workers
        if workers.device.type == "cuda":
            # DeepSpeed (zero.Init too) picks its GPU by LOCAL_RANK; make that the one Ray assigned.
            os.environ["LOCAL_RANK"] = str(workers.device.index)
        self.stage = config.resources.deepspeed.effective_stage
        training = config.training
        settings = deepspeed_config(config)
        with _partitioned_at_creation(settings if self.stage == 3 else None):
            model = adapted_base(config, model_source, workers.device)
        self.peft_model = model
        self.model, self.optimizer, _, self.schedule = deepspeed.initialize(
            model=model,
            optimizer=make_optimizer(model, training),
            lr_scheduler=lambda optimizer: make_schedule(optimizer, training),
            config=settings,
            dist_init_required=False,
        )

    def backward(self, loss: torch.Tensor) -> None:
        # The engine scales by 1/accumulation itself and steps only at the boundary, so
        # every micro-batch but the last is stepped here.
        self.model.backward(loss)
        if not self.model.is_gradient_accumulation_boundary():
            self.model.step()

    def step(self) -> float:
        learning_rate = self.model.get_lr()[0]
        self.model.step()
        return learning_rate

    def save(self, checkpoint_dir: str, step: int) -> None:
        self._save_adapter(checkpoint_dir)
        self.model.save_checkpoint(
            checkpoint_dir, tag=DEEPSPEED_TAG, client_state={"step": step}, exclude_frozen_parameters=True
        )

    def _save_adapter(self, checkpoint_dir: str) -> None:
        """The adapter as peft saves it, gathered from all workers under ZeRO-3."""
        import deepspeed

        trainable = [p for p in self.peft_model.parameters() if p.requires_grad]
        if self.stage == 3:
            with deepspeed.zero.GatheredParameters(trainable, modifier_rank=None):
                if self.workers.is_main:
                    self.peft_model.save_pretrained(checkpoint_dir)
        elif self.workers.is_main:
            self.peft_model.save_pretrained(checkpoint_dir)

    def restore(self, checkpoint_dir: str) -> int:
        _, client_state = self.model.load_checkpoint(
            checkpoint_dir, tag=DEEPSPEED_TAG, load_module_strict=False,
            load_optimizer_states=True, load_lr_scheduler_states=True,
        )
        if client_state is None:
            raise RuntimeError(f"no DeepSpeed checkpoint in {checkpoint_dir}/{DEEPSPEED_TAG}")
        return int(client_state["step"])


class _partitioned_at_creation:
    """While alive, transformers builds models inside DeepSpeed's `zero.Init` with
    `settings` (it holds a weak reference to the HfDeepSpeedConfig: transformers' documented
    way to use ZeRO-3 without its Trainer); afterwards it does not, so a later model of the
    same process (another trial, a calibration) loads as its own strategy asks. No-op for
    `settings` None."""

    def __init__(self, settings: dict | None):
        self.settings = settings
        self.hf_config = None

    def __enter__(self):
        if self.settings is not None:
            from transformers.integrations import HfDeepSpeedConfig

            self.hf_config = HfDeepSpeedConfig(self.settings)
        return self

    def __exit__(self, *exc_info) -> None:
        self.hf_config = None


# ---------------------------------------------------------------- FSDP


class FsdpStrategy:
    """PyTorch FSDP2 (`fully_shard`): each decoder layer is one shard group, the rest of
    the model another; parameters, gradients and optimizer states are sharded over the
    trial's workers (it runs over gloo on CPUs too).

    Sharded from the start: every worker builds the adapted model on the meta device (no
    storage), shards it, and materialises only its own shards on its device; rank 0 alone
    reads the weights, on the CPU, and sends them over tensor by tensor, each worker
    keeping its shard (`set_model_state_dict(..., broadcast_from_rank0=True)`). No device
    ever holds the whole model."""

    def __init__(self, config: TrialConfig, model_source: str, workers):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        training = config.training
        self.workers = workers
        self.training = training
        # Rank 0's copy on the CPU, with the seeded adapters (as every worker would draw them).
        whole = adapted_base(config, model_source, torch.device("cpu")) if workers.is_main else None
        model = adapt(
            empty_base_model(model_source, training.precision, attn_implementation=config.model.attn_implementation),
            config,
            on_meta=True,
        )
        _take_random_state_of_rank0()
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if training.precision == "bf16" else MixedPrecisionPolicy()
        layer_classes = tuple(getattr(model.base_model.model, "_no_split_modules", None) or ())
        for module in model.modules():
            if type(module).__name__ in layer_classes:
                fully_shard(module, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        model.to_empty(device=workers.device)
        set_model_state_dict(
            model, whole.state_dict() if whole is not None else {},
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )
        # Buffers that no state dict holds (rotary frequencies): rank 0's, to every worker.
        for name, buffer in model.named_buffers():
            if whole is not None:
                buffer.copy_(whole.get_buffer(name))
            torch.distributed.broadcast(buffer, src=0)
        del whole
        self.peft_model = self.model = model
        self.optimizer = make_optimizer(model, training)
        self.schedule = make_schedule(self.optimizer, training)
        self.micro_batches = training.gradient_accumulation_steps

    def backward(self, loss: torch.Tensor) -> None:
        (loss / self.micro_batches).backward()

    def step(self) -> float:
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.training.max_grad_norm)
        self.optimizer.step()
        return _finish_step(self.optimizer, self.schedule)

    def save(self, checkpoint_dir: str, step: int) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        # Full (unsharded) tensors of the adapters only, on rank 0; collective.
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        model_state = get_model_state_dict(self.model, options=options)
        optimizer_state = get_optimizer_state_dict(self.model, self.optimizer, options=options)
        if not self.workers.is_main:
            return
        self.peft_model.save_pretrained(checkpoint_dir, state_dict=model_state)
        state = {"step": step, "model": model_state, "optimizer": optimizer_state, "schedule": self.schedule.state_dict()}
        torch.save(state, os.path.join(checkpoint_dir, TRAINING_STATE_FILE))

    def restore(self, checkpoint_dir: str) -> int:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        state = torch.load(os.path.join(checkpoint_dir, TRAINING_STATE_FILE), weights_only=False)
        options = StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(self.model, state["model"], options=options)
        set_optimizer_state_dict(self.model, self.optimizer, state["optimizer"], options=options)
        self.schedule.load_state_dict(state["schedule"])
        return int(state["step"])
