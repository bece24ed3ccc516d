"""`sweep init`: a first sweep file for a model and a data file, written as commented YAML.

The search space comes from published guidance, each range with its source in a comment;
the sizes come from the data and the card:

- `data.max_length` from the examples' token lengths, read with the model's tokenizer the
  way a trial reads them (`trainables.data`);
- the batch (16 sequences a step) and `training.max_steps` (one epoch, at least 4 steps an
  evaluation over 27 evaluations, at most `MAX_STEPS`) from the number of examples;
- with a GPU named, the micro-batch, gradient checkpointing and 4-bit quantization from
  the memory forecast (`sweeper.cost.memory`) for that card.

The file is validated as the `sweep validate` command would before it is written; the
model and the data are refused with one keyed line when they cannot be read.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from sweeper.errors import UserError

__all__ = ["Profile", "SweepFile", "GPU_TYPES", "EVAL_NAMES", "profile_data", "scaffold_sweep", "write_sweep_file"]

TASKS = ("sft", "dpo")
# Names tried beside the training file when no evaluation split is given.
EVAL_NAMES = ("eval", "validation", "valid", "val", "test", "dev")
# Examples tokenized to measure lengths (evenly spread over the file); the rest are counted.
SAMPLE = 4000
# Sequences per optimizer step: trl's example LoRA commands (trl/scripts/sft.py and dpo.py)
# train 2 a device x 8 accumulated; LoRA loses more than full fine-tuning at large batches
# (LoRA Without Regret), so the sweep stays at the small end of the usual 16-128.
BATCH = 16
# Evaluations of a full-length trial: ASHA's first rung sits at max_steps / 27 rounded up to
# an evaluation (docs/concepts/asha.md), so an evaluation every max_steps / 27 steps puts the
# screen at the first one.
EVALUATIONS = 27
MIN_STEPS_PER_EVAL = 4
# A trial of a large data set trains on a part of it: a search compares configs; the winner
# trains on everything afterwards (sweep export, then raise training.max_steps).
MAX_STEPS = 2000
MAX_LENGTH_CAP = 4096
# Tokens a CPU trial's micro-batch holds at most (host memory, not a GPU's, is the limit).
CPU_MICRO_BATCH_TOKENS = 8192


def _gpu_types() -> dict[str, float]:
    """The cards `--gpu` takes: priced in the built-in table and with a known memory size."""
    from sweeper.cost.memory import GPU_MEMORY_GIB
    from sweeper.cost.prices import PRICE_TABLE

    return {name: GPU_MEMORY_GIB[name] for name in PRICE_TABLE if name in GPU_MEMORY_GIB}


GPU_TYPES = tuple(_gpu_types())


@dataclass(frozen=True)
class Profile:
    """What the data file holds, measured with the model's tokenizer."""

    examples: int
    measured: int  # examples tokenized (all, or an even sample of SAMPLE)
    lengths: tuple[int, ...]  # tokens of each measured example (prompt + longer answer for dpo)
    prompt_lengths: tuple[int, ...]  # dpo: the prompts' tokens; sft: empty

    def percentile(self, q: float, values: tuple[int, ...] | None = None) -> int:
        ordered = sorted(self.lengths if values is None else values)
        return ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1)]

    @property
    def mean(self) -> float:
        return sum(self.lengths) / len(self.lengths)

    @property
    def tokens(self) -> int:
        """Tokens in the whole file (estimated from the sample when it was sampled)."""
        return round(self.mean * self.examples)


@dataclass(frozen=True)
class SweepFile:
    """The YAML text `sweep init` writes and the spec it validates to."""

    text: str
    spec: object  # SweepSpec
    memory: object | None  # MemoryForecast of a GPU trial


# ---------------------------------------------------------------- arguments


def check_task(task: str) -> str:
    if task not in TASKS:
        raise UserError(f"--task: {task!r} is not a task; valid: {', '.join(TASKS)}")
    return task


def check_gpu(gpu: str | None) -> str | None:
    if gpu is None:
        return None
    name = gpu.lower()
    if name not in GPU_TYPES:
        raise UserError(f"--gpu: no GPU type {gpu!r}; valid: {', '.join(GPU_TYPES)} (leave it out for CPUs)")
    return name


def model_source(model: str) -> tuple[str, str]:
    """(what the YAML names, what transformers loads) for `--model`, refused keyed when it
    is neither a built-in model, a model folder, nor a Hub id the cache or the Hub has."""
    from trainables.sections import BUILTIN_MODELS, model_folder_problem

    if model.startswith("builtin:"):
        if model not in BUILTIN_MODELS:
            raise UserError(f"--model: no built-in model {model!r}; valid: {', '.join(BUILTIN_MODELS)}")
        from trainables.models import resolve_model_source

        return model, resolve_model_source(model)
    path = Path(model).expanduser()
    if path.exists() or model.startswith(("/", "./", "../", "~")) or model.count("/") > 1:
        problem = model_folder_problem(path.resolve())
        if problem:
            raise UserError(f"--model: {problem}")
        from trainables.models import adapter_base

        folder = str(path.resolve())
        return folder, adapter_base(folder) or folder
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", model):
        raise UserError(
            f"--model: {model!r} is neither a folder here nor a Hub id ORG/NAME; give a model folder "
            "(what save_pretrained wrote), a Hub id such as Qwen/Qwen2.5-0.5B-Instruct, or builtin:tiny-llama"
        )
    return model, model


def load_tokenizer_for(model: str, source: str):
    """The model's tokenizer; a model that cannot be found or read is refused keyed `--model`."""
    from trainables.errors import InputError
    from trainables.models import check_model_config, load_tokenizer

    try:
        check_model_config(source)
        return load_tokenizer(source)
    except InputError as exc:
        reason = str(exc).split(f"{source}: ", 1)[-1].rstrip(".")
        where = "in the Hugging Face cache or on the Hub" if source == model and not Path(model).exists() else "there"
        raise UserError(
            f"--model: cannot find or read {model} {where} ({reason}); give a local model folder, a Hub id "
            "that is cached (HF_HUB_CACHE, HF_HOME) or reachable, or builtin:tiny-llama"
        ) from None


def data_source(value: str, flag: str):
    """A local path (resolved) or a Hub split `org/name:split`, as the schema reads `data.*`."""
    from trainables.sections import HubSplit

    hub_split = HubSplit.parse(value)
    path = Path(value).expanduser()
    if hub_split is not None and not path.exists():
        return hub_split
    if not path.exists():
        raise UserError(
            f"{flag}: {value} does not exist; give a JSONL or Parquet file, a save_to_disk folder, "
            "or a Hub dataset's split as org/name:split"
        )
    return path.resolve()


def eval_beside(train) -> Path:
    """The evaluation split beside the training file: `eval`, `validation`, ... with the
    training file's suffix, or its name with `train` replaced by one of those."""
    from trainables.sections import HubSplit

    if isinstance(train, HubSplit):
        raise UserError(f"--eval: give the evaluation split of {train.repo_id} (e.g. {train.repo_id}:validation)")
    candidates = []
    for name in EVAL_NAMES:
        candidates.append(train.parent / f"{name}{train.suffix}")
        if "train" in train.name:
            candidates.append(train.parent / train.name.replace("train", name))
    for candidate in dict.fromkeys(candidates):
        if candidate != train and candidate.exists():
            return candidate
    looked = ", ".join(f"{name}{train.suffix}" for name in EVAL_NAMES)
    raise UserError(
        f"--eval: no evaluation split beside {train} (looked for {looked}); give --eval FILE, a few hundred "
        "examples held out of training"
    )


# ---------------------------------------------------------------- the data


def profile_data(source, tokenizer, task: str, flag: str, sample: int = SAMPLE) -> Profile:
    """Count the examples of `source` and measure an even sample of them with the tokenizer,
    whole (no truncation), as the trial would tokenize them. Unreadable data and examples
    of the wrong shape are refused keyed `flag`."""
    from trainables.data import preference_example, read_records, sft_example

    records = read_records(source, flag)
    step = max(1, len(records) // sample)
    measured = records[::step][:sample]
    lengths, prompts = [], []
    whole = 10**9
    for number, record in measured:
        where = f"{flag}: {source} line {number}"
        if task == "dpo":
            prompt, chosen, rejected = preference_example(record, tokenizer, whole, whole, where)
            lengths.append(len(prompt) + max(len(chosen), len(rejected)))
            prompts.append(len(prompt))
        else:
            ids, _ = sft_example(record, tokenizer, whole, where)
            lengths.append(len(ids))
    return Profile(len(records), len(measured), tuple(lengths), tuple(prompts))


# ---------------------------------------------------------------- sizing


def _round_up(value: float, multiple: int) -> int:
    return max(multiple, math.ceil(value / multiple) * multiple)


def _pow2_at_most(value: int) -> int:
    return 1 << (max(1, value).bit_length() - 1)


@dataclass(frozen=True)
class Schedule:
    batch: int
    steps_per_epoch: int
    max_steps: int
    eval_every: int
    why: str  # the comment on max_steps


def schedule(examples: int) -> Schedule:
    """One epoch of BATCH-sequence steps, held within [27 x 4, MAX_STEPS] steps and made 27
    evaluations long."""
    batch = min(BATCH, _pow2_at_most(examples))
    per_epoch = math.ceil(examples / batch)
    least = EVALUATIONS * MIN_STEPS_PER_EVAL
    if per_epoch < least:
        steps = least
        why = f"One epoch is only {per_epoch} steps of {batch}: {least} steps ({least / per_epoch:.1f} epochs)"
    elif per_epoch > MAX_STEPS:
        steps = MAX_STEPS
        why = (f"One epoch is {per_epoch} steps of {batch}; each trial trains on the first {MAX_STEPS} "
               f"({MAX_STEPS / per_epoch:.0%} of the data), enough to compare configs (train the winner on all "
               "of it: sweep export, then a larger training.max_steps)")
    else:
        steps = per_epoch
        why = f"One epoch (trl's example commands train one): {examples} examples / {batch} a step = {per_epoch} steps"
    eval_every = math.ceil(steps / EVALUATIONS)
    why += (f". {EVALUATIONS} evaluations of {eval_every} steps: ASHA's first rung is the first of them "
            "(max_steps / 27, docs/concepts/asha.md).")
    return Schedule(batch, per_epoch, eval_every * EVALUATIONS, eval_every, why)


def max_lengths(profile: Profile, task: str) -> tuple[int, int | None, str]:
    """data.max_length (and dpo.max_prompt_length) from the 99th percentile, rounded up."""
    longest = max(profile.lengths)
    length = min(MAX_LENGTH_CAP, _round_up(max(profile.percentile(99), 16), 64))
    fit = sum(1 for n in profile.lengths if n <= length) / len(profile.lengths)
    fits = "every example fits whole" if fit == 1 else f"{fit:.1%} of the examples fit whole (the longest has {longest})"
    why = f"Examples are cut to this many tokens: the 99th percentile ({profile.percentile(99)}) rounded up to a multiple of 64; {fits}."
    if task != "dpo":
        return length, None, why
    prompt = _round_up(profile.percentile(99, profile.prompt_lengths), 32)
    if prompt >= length:
        length = min(MAX_LENGTH_CAP, _round_up(prompt + 64, 64))
        prompt = min(prompt, length - 32)
    return length, prompt, why


@dataclass(frozen=True)
class Fit:
    micro_batch: int
    checkpointing: bool
    quantization: str
    memory: object | None  # MemoryForecast
    why: str


def fit_on(raw: dict, base_dir: Path, gpu: str | None, batch: int) -> Fit:
    """The micro-batch, gradient checkpointing and quantization of a trial: on CPUs a
    micro-batch of at most CPU_MICRO_BATCH_TOKENS tokens; on a GPU the fastest setting the
    memory forecast fits on the card (no checkpointing with a micro-batch of 4 or more,
    else checkpointing with the largest micro-batch that fits, else nf4 with checkpointing)."""
    from sweeper.cost.memory import forecast_trial_memory, gpu_memory_gib
    from sweeper.spec.load import validate_spec

    length = raw["data"]["max_length"]
    if gpu is None:
        micro = min(batch, _pow2_at_most(max(1, CPU_MICRO_BATCH_TOKENS // length)))
        return Fit(micro, False, "none", None, f"On CPUs, micro-batches of at most {CPU_MICRO_BATCH_TOKENS} tokens")
    card = gpu_memory_gib(gpu)
    sizes = [m for m in (batch, batch // 2, batch // 4, batch // 8, batch // 16) if m >= 1]

    def estimate(micro: int, checkpointing: bool, quantization: str):
        trial = {**raw, "model": {**raw["model"], "quantization": quantization},
                 "training": {**raw["training"], "per_device_batch_size": micro,
                              "gradient_checkpointing": checkpointing}}
        return forecast_trial_memory(validate_spec(trial, base_dir=base_dir))

    first = estimate(sizes[0], False, "none")
    if first is None:  # the model's config has no shape the forecast reads
        return Fit(min(batch, 4), True, "none", None,
                   "The memory forecast cannot read this model's config: a cautious micro-batch with checkpointing")
    tries = [(m, False, "none") for m in sizes if m >= min(4, batch)]
    tries += [(m, True, "none") for m in sizes] + [(m, True, "nf4") for m in sizes]
    for micro, checkpointing, quantization in tries:
        memory = estimate(micro, checkpointing, quantization)
        if memory.fits(card):
            how = {(False, "none"): "without gradient checkpointing", (True, "none"): "with gradient checkpointing",
                   (True, "nf4"): "with the base in 4-bit nf4 (QLoRA) and gradient checkpointing"}[(checkpointing, quantization)]
            why = (f"The largest micro-batch the memory forecast fits on one {gpu} ({card:g} GiB) {how}: "
                   f"about {memory.needs_gib():.1f} GiB with CUDA context and allocator slack")
            return Fit(micro, checkpointing, quantization, memory, why)
    least = estimate(1, True, "nf4")
    raise UserError(
        f"--gpu: {raw['model']['name_or_path']} does not fit a {gpu} ({card:g} GiB) even in nf4 with gradient "
        f"checkpointing and micro-batch 1 (about {least.needs_gib():.0f} GiB); name a larger card "
        f"({', '.join(g for g in GPU_TYPES if gpu_memory_gib(g) > card) or 'none larger is known'}) or shard the "
        "model over several GPUs per trial (resources.strategy: deepspeed, zero_stage 3)"
    )


# ---------------------------------------------------------------- the file


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
    from sweeper.cost.memory import forecast_trial_memory
    from sweeper.plan.checks import check_spec
    from sweeper.spec.load import validate_spec
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
    spec = validate_spec(yaml.safe_load(text), base_dir=folder, source=str(output))
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
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(indent) + 2 + len(line) + 1 + len(word) > width:
            lines.append(f"{indent}# {line}")
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + ([f"{indent}# {line}"] if line else [])


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
