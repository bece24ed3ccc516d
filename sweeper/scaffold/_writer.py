"""`sweep init`'s file: the search space from published guidance with each source in a
comment, the sections sized from the data, written as commented YAML once it validates."""

from __future__ import annotations

import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from sweeper.errors import UserError
from sweeper.scaffold._arguments import (
    check_gpu,
    check_task,
    data_source,
    eval_beside,
    load_tokenizer_for,
    model_source,
    profile_data,
)
from sweeper.scaffold._sizing import fit_on, max_lengths, schedule


@dataclass(frozen=True)
class SweepFile:
    """The YAML text `sweep init` writes and the spec it validates to."""

    text: str
    spec: object  # SweepSpec
    memory: object | None  # MemoryForecast of a GPU trial


def _fmt(value: float) -> str:
    """5e-05 as 5.0e-5: a float to YAML (which needs the dot) and short to read."""
    mantissa, exponent = f"{value:.2e}".split("e")
    mantissa = mantissa.rstrip("0")
    return f"{mantissa}0e{int(exponent)}" if mantissa.endswith(".") else f"{mantissa}e{int(exponent)}"


def _name_for(model: str, task: str) -> str:
    base = Path(model.removeprefix("builtin:")).name or "model"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{base}-{task}".lower()).strip("-._")
    return name[:100] or f"sweep-{task}"


def _relative(path, folder: Path) -> str:
    """A local path as the YAML should name it: relative to the YAML's folder."""
    if not isinstance(path, Path):
        return str(path)
    text = os.path.relpath(path, folder)
    return text if text.startswith("..") else f"./{text}" if path.is_dir() else text


def scaffold_sweep(
    model: str, data: str, output: Path, *, task: str = "sft", gpu: str | None = None,
    eval_data: str | None = None, trials: int = 16, name: str | None = None, command: str = "",
) -> SweepFile:
    """The commented sweep file for `model` and `data`, validated (not yet written)."""
    from sweeper.cost import forecast_trial_memory
    from sweeper.plan import check_spec
    from sweeper.spec import parse_yaml, validate_spec
    from trainables.sections import BUILTIN_TINY_MODEL

    task, gpu = check_task(task), check_gpu(gpu)
    if trials < 1:
        raise UserError(f"--trials: must be >= 1, got {trials}")
    yaml_model, source = model_source(model)
    train = data_source(data, "--data")
    evaluation = data_source(eval_data, "--eval") if eval_data else eval_beside(train)
    tokenizer = load_tokenizer_for(model, source)
    profile = profile_data(train, tokenizer, task, "--data")
    eval_profile = profile_data(evaluation, tokenizer, task, "--eval", sample=50)

    folder = output.resolve().parent
    length, prompt_length, length_why = max_lengths(profile, task)
    plan = schedule(profile.examples)
    name = name or _name_for(model, task)
    raw = {
        "name": name, "task": task, "model": {"name_or_path": yaml_model},
        "data": {"train": _relative(train, folder), "eval": _relative(evaluation, folder), "max_length": length},
        "training": {"max_steps": plan.max_steps, "eval_every": plan.eval_every},
        "lora": {"alpha": 32},
        "search": {"num_trials": trials, "parameters": {}},
        "resources": {"use_gpu": True, "gpus_per_worker": 1} if gpu else {},
        "cost": {"accelerator": gpu} if gpu else {},
    }
    if prompt_length:
        raw["dpo"] = {"max_prompt_length": prompt_length}
    if gpu:
        raw["training"]["precision"] = "bf16"
    parameters, metric_lines = _space(task, tiny=yaml_model == BUILTIN_TINY_MODEL)
    raw["search"]["parameters"] = {key: value for key, value, _ in parameters}
    fit = fit_on(raw, folder, gpu, plan.batch)  # at the largest searched rank
    lines = _header(command, output, name)
    lines += [f"name: {name}", f"task: {task}", "model:", f"  name_or_path: {yaml_model}"]
    if fit.quantization != "none":
        lines += ["  # The base in 4-bit NormalFloat (QLoRA; needs the quantization extra, bitsandbytes):",
                  "  # nothing lighter fits the card, see training.per_device_batch_size.",
                  f"  quantization: {fit.quantization}"]
    sampled = f", measured on {profile.measured} of them" if profile.measured < profile.examples else ""
    lines += [
        "data:",
        *_comment(f"{profile.examples} examples, about {profile.tokens:,} tokens ({profile.mean:.0f} an example on "
                  f"average{sampled}), read with the model's tokenizer as a trial reads them.", "  "),
        f"  train: {_quote(raw['data']['train'])}",
        *_comment(f"{eval_profile.examples} examples: every trial evaluates all of them every eval_every steps; "
                  "a few hundred are enough to rank configs.", "  "),
        f"  eval: {_quote(raw['data']['eval'])}",
        *_comment(length_why, "  "),
        f"  max_length: {length}",
    ]
    if prompt_length:
        lines += ["dpo:", "  # Prompts are cut to their last this many tokens: the 99th percentile of the prompts,",
                  "  # rounded up to 32.", f"  max_prompt_length: {prompt_length}"]
    accumulation = plan.batch // fit.micro_batch
    lines += [
        "training:",
        *_comment(plan.why, "  "),
        f"  max_steps: {plan.max_steps}",
        f"  eval_every: {plan.eval_every}",
        *_comment(f"{plan.batch} sequences a step, as trl's example LoRA commands (2 a device x 8 accumulated): "
                  "LoRA Without Regret finds LoRA less tolerant of large batches than full fine-tuning.", "  "),
        *_comment(fit.why + ".", "  "),
        f"  per_device_batch_size: {fit.micro_batch}",
    ]
    if accumulation > 1:
        lines.append(f"  gradient_accumulation_steps: {accumulation}")
    if gpu:
        lines += [f"  precision: bf16                # {gpu} is an Ampere or newer card"]
    if fit.checkpointing:
        lines += ["  gradient_checkpointing: true   # recompute activations: a third more compute, far less memory"]
    lines += [
        "lora:",
        "  # alpha fixed, not tied to the rank: with LoRA's alpha / r scaling the best learning rate",
        "  # then barely moves with the rank (LoRA Without Regret kept alpha at 32), so the rate and",
        "  # the rank below can be searched independently. Adapters on every attention and MLP",
        "  # projection (the default lora.target_modules), as that paper found necessary.",
        "  alpha: 32",
    ]
    lines += ["search:", *metric_lines, f"  num_trials: {trials}", "  parameters:"]
    for key, value, why in parameters:
        lines += [*_comment(why, "    "), f"    {key}: {_flow(value)}"]
    lines += [
        "    # Or tie alpha to the rank (alpha = 2 x r, a common convention; the shipped GPU sweeps",
        "    # search 1 and 2), but then the best learning rate moves with the rank:",
        "    #   lora.alpha_per_rank: {distribution: categorical, values: [1, 2]}",
    ]
    if gpu:
        lines += ["resources:", "  use_gpu: true", "  gpus_per_worker: 1",
                  "cost:", f"  accelerator: {gpu}            # prices the sweep and sizes the memory check"]
    lines += [
        "# early_stopping: the default, ASHA by promotion: every trial trains to step "
        f"{plan.eval_every} (the first",
        "# evaluation), the best quarter to the end (docs/concepts/asha.md).",
    ]
    text = "\n".join(lines) + "\n"

    # The one validation pass of `sweep validate`: the schema, then what the disk and the card show.
    spec = validate_spec(parse_yaml(text, output), base_dir=folder, source=str(output))
    check_spec(spec)
    return SweepFile(text, spec, forecast_trial_memory(spec) if gpu else None)


def _space(task: str, tiny: bool) -> tuple[list[tuple[str, dict, str]], list[str]]:
    """(key, distribution, why) of each searched parameter, and the metric's lines."""
    if task == "dpo":
        center, low, high = 5e-6, 1.25e-6, 2e-5
        rate_why = ("LoRA's best learning rate is about 10x full fine-tuning's and barely depends on the rank "
                    "(Thinking Machines, \"LoRA Without Regret\", 2025); trl's example DPO commands use 5e-7 "
                    "for full training and 5e-6 with LoRA (trl/scripts/dpo.py). Searched 4x either side of 5e-6.")
    else:
        center, low, high = 2e-4, 5e-5, 8e-4
        rate_why = ("LoRA's best learning rate is about 10x full fine-tuning's and barely depends on the rank "
                    "(Thinking Machines, \"LoRA Without Regret\", 2025); trl's example SFT commands use 2e-5 "
                    "for full training and 2e-4 with LoRA (trl/scripts/sft.py). Searched 4x either side of 2e-4.")
    if tiny:
        low, high = 1e-4, 3e-2
        rate_why = ("builtin:tiny-llama is a 2-layer toy that needs far higher rates than real models "
                    "(search_spaces/quickstart.yaml): this range is the quickstart's. For a real model the "
                    + ("DPO" if task == "dpo" else "SFT") + f" range is {_fmt(center / 4)} to {_fmt(center * 4)}: "
                    "LoRA's best rate is about 10x full fine-tuning's (LoRA Without Regret, 2025).")
    parameters = [("training.learning_rate", {"distribution": "log_uniform", "low": low, "high": high}, rate_why)]
    if task == "dpo":
        parameters += [
            ("dpo.beta", {"distribution": "log_uniform", "low": 0.05, "high": 0.5},
             "How strongly the policy is held to the reference (higher: closer). trl's DPOConfig defaults "
             "to 0.1; searched 0.05 to 0.5 on a log scale, as the shipped DPO sweeps."),
            ("lora.r", {"distribution": "categorical", "values": [16, 32, 64]},
             "Ranks 16-64, as the shipped DPO sweep (trl's example DPO command uses r=32)."),
            ("training.warmup_ratio", {"distribution": "uniform", "low": 0.05, "high": 0.15},
             "Linear warmup over 5-15% of training, as the shipped DPO sweep."),
        ]
        metric = ["  # Reward accuracy (share of held-out pairs whose chosen answer outscores the rejected one)",
                  "  # compares trials across beta; the DPO loss does not, its scale moves with beta.",
                  "  metric: eval_rewards_accuracy", "  goal: maximize"]
    else:
        parameters += [
            ("lora.r", {"distribution": "categorical", "values": [8, 16, 32, 64]},
             "Ranks 8-64 (trl's example SFT command uses r=32): LoRA Without Regret finds rank matters "
             "once the data outgrows the adapter's capacity, so larger data sets want the higher ranks."),
            ("training.warmup_ratio", {"distribution": "uniform", "low": 0.03, "high": 0.1},
             "Linear warmup over 3-10% of training, as the shipped GPU sweeps."),
        ]
        metric = []
    return parameters, metric


def _header(command: str, output: Path, name: str) -> list[str]:
    return [
        f"# Run: sweep start {output}",
        f"# Written by: {command}" if command else "# Written by sweep init.",
        "# Every value below says where it comes from. Before running: `sweep validate` checks the",
        "# file, `sweep plan` forecasts its wall time and cost. While and after it runs:",
        f"# sweep status {name}, sweep report {name}, sweep promote {name}.",
    ]


def _comment(text: str, indent: str, width: int = 92) -> list[str]:
    lines = textwrap.wrap(text, width - len(indent) - 2, break_long_words=False, break_on_hyphens=False)
    return [f"{indent}# {line}" for line in lines]


def _flow(value: dict) -> str:
    """A distribution as one flow-style YAML mapping, floats in scientific notation."""
    parts = []
    for key, item in value.items():
        if isinstance(item, float):
            text = _fmt(item) if item < 0.01 else f"{item:g}"
            if "e" not in text and "." not in text:
                text += ".0"
        elif isinstance(item, list):
            text = "[" + ", ".join(str(v) for v in item) + "]"
        else:
            text = str(item)
        parts.append(f"{key}: {text}")
    return "{" + ", ".join(parts) + "}"


def _quote(text: str) -> str:
    """A scalar YAML reads back as the same string."""
    return text if yaml.safe_load(text) == text and ": " not in text and not text.startswith(("#", "{", "[")) else repr(text)


def write_sweep_file(sweep: SweepFile, output: Path, force: bool = False) -> None:
    if output.exists() and not force:
        raise UserError(f"--output: {output} exists; give another file name, or --force to overwrite it")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(sweep.text)
    except OSError as exc:
        raise UserError(f"--output: cannot write {output}: {exc.strerror}") from None
