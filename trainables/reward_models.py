"""Reward models in `trl.reward_funcs`, and the entries' names (`is_function_entry`,
`reward_name`: a leaf module, read by the config's schema as well as by trials): an
entry that is not FILE.py:FUNCTION is the hub id or local folder of a
sequence-classification model with one label, which trl 1.16's GRPOTrainer loads itself
(`AutoModelForSequenceClassification.from_pretrained(id, num_labels=1,
**model_init_kwargs)`, its tokenizer by `AutoTokenizer.from_pretrained`, the eos as pad
where it has none) and scores each prompt + completion with (the text padded on the
right, a chat one rendered with the reward model's own chat template; the reward is the
logit at the last token that is not padding).

`reward_model_problem` does the same once, before any trial, on a few eval rows with the
references as completions: a model that is not found, is no sequence-classification model
with one label (a causal LM's folder would load with a randomly initialised head and
reward noise), or fails to score, is one keyed line instead of a failure in every trial.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["is_function_entry", "reward_model_problem", "reward_name"]

_FIX = ("give a sequence-classification model with one label (e.g. LlamaForSequenceClassification, num_labels=1, "
        "saved with its tokenizer), or FILE.py:FUNCTION")


def is_function_entry(entry: str) -> bool:
    """Whether an entry of `trl.reward_funcs` names a function (FILE.py:FUNCTION) rather
    than a reward model (a hub id or a local folder)."""
    file, sep, name = entry.rpartition(":")
    return bool(sep) and file.endswith(".py") and name.isidentifier()


def reward_name(entry: str) -> str:
    """The name trl logs an entry's reward under, and the sweep reports it as
    eval_reward_<name>: a function's name; a reward model's id or folder name after its
    last "/" (trl: the model config's name_or_path, split at "/")."""
    if is_function_entry(entry):
        return entry.rpartition(":")[2]
    return entry.rstrip("/").rsplit("/", 1)[-1]


def reward_model_problem(source: str, prompts: list, completions: list, trl_fields: dict[str, Any]) -> str | None:
    """Why trl could not load `source` as a reward model and score `completions` for
    `prompts` (in trl's form: chat messages or text), or None. `trl_fields`: the trl
    section's fields (model_init_kwargs, trust_remote_code, chat_template_kwargs, as trl
    reads them from GRPOConfig)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    from trainables.models import from_cache_first, hub_unreachable

    kwargs = dict(trl_fields.get("model_init_kwargs") or {})
    kwargs.pop("device_map", None)  # scored here on the CPU
    kwargs.setdefault("trust_remote_code", bool(trl_fields.get("trust_remote_code", False)))
    local = Path(source).is_dir()
    if not local and (source.startswith(("/", "./", "../", "~")) or Path(source).exists()):
        return f"no model folder at {source}; {_FIX}"
    if not local and not _in_cache(source) and (unreachable := hub_unreachable()):
        return (f"{source} is neither a folder beside the sweep file nor a model in the Hugging Face cache, and the "
                f"Hub cannot be reached ({unreachable}); give a local folder, or download it once")
    try:
        config = from_cache_first(AutoConfig.from_pretrained, source, trust_remote_code=kwargs["trust_remote_code"])
    except Exception as exc:  # transformers raises OSError, ValueError, ... for a model it cannot find or read
        return f"cannot load the model config of {source}: {_first_line(exc)}; {_FIX}"
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures and not any(name.endswith("ForSequenceClassification") for name in architectures):
        return (f"{source} is no sequence-classification model (architectures: {', '.join(architectures)}); trl "
                f"would score with a randomly initialised head; {_FIX}")
    if config.num_labels != 1:
        return (f"{source} has {config.num_labels} labels; trl loads a reward model with num_labels=1 (one score per "
                f"completion); {_FIX}")
    try:
        model, loading = from_cache_first(AutoModelForSequenceClassification.from_pretrained, source, num_labels=1,
                                          output_loading_info=True, **kwargs)
    except Exception as exc:  # an architecture without a sequence-classification class, weights that do not fit, ...
        return f"loading {source} as trl does (AutoModelForSequenceClassification, num_labels=1) failed: {_first_line(exc)}"
    missing = sorted(loading.get("missing_keys") or []) + sorted(loading.get("mismatched_keys") or [])
    if missing:
        return (f"{source}'s checkpoint lacks {', '.join(map(str, missing[:3]))}: trl would score with randomly "
                f"initialised weights; {_FIX}")
    try:
        tokenizer = from_cache_first(AutoTokenizer.from_pretrained, source, trust_remote_code=kwargs["trust_remote_code"])
    except Exception as exc:  # no tokenizer files, ...
        return (f"cannot load a tokenizer from {source} (trl loads the reward model's own): {_first_line(exc).rstrip(': ')}; "
                "save it into the model's folder (tokenizer.save_pretrained)")
    return _scoring_problem(source, model, tokenizer, prompts, completions, trl_fields.get("chat_template_kwargs") or {})


def _scoring_problem(source: str, model, tokenizer, prompts: list, completions: list,
                     chat_template_kwargs: dict) -> str | None:
    """GRPOTrainer._calculate_rewards for one reward model, on `completions`."""
    import torch
    from trl import apply_chat_template

    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.pad_token_id is None:
        return f"{source}'s tokenizer has no pad token and no eos token; trl pads the completions it scores with one"
    model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
    if isinstance(prompts[0], list) and tokenizer.chat_template is None:
        return (f"the sweep's rows are chat, and {source}'s tokenizer has no chat template, with which trl renders "
                "each prompt + completion for it; save the tokenizer with one, or give prompt/completion rows")
    try:
        if isinstance(prompts[0], list):  # chat: rendered with the reward model's chat template
            texts = [apply_chat_template({"messages": p + c}, tokenizer, **chat_template_kwargs)["text"]
                     for p, c in zip(prompts, completions)]
        else:
            texts = [p + c for p, c in zip(prompts, completions)]
        inputs = tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right",
                           add_special_tokens=False)
        with torch.inference_mode():
            rewards = model(**inputs).logits[:, 0].float().tolist()
    except Exception as exc:  # the model's or tokenizer's own errors: no chat template, ...
        return (f"scoring {len(prompts)} eval rows (the references as completions) with {source} as trl does "
                f"failed: {type(exc).__name__}: {_first_line(exc)}")
    if not all(math.isfinite(r) for r in rewards):
        return f"{source} scored the references {rewards}: not every reward is a finite number"
    return None


def _in_cache(source: str) -> bool:
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(source, local_files_only=True)
    except Exception:  # not in the cache, or unreadable there (said when it is loaded)
        return False
    return True


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
