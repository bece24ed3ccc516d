"""`sweep init`'s inputs: the task, the GPU named, the model and its tokenizer, the data file
(and its evaluation split beside it), and the data's profile (examples, token lengths)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import UserError

TASKS = ("sft", "dpo")

# Names tried beside the training file when no evaluation split is given.
EVAL_NAMES = ("eval", "validation", "valid", "val", "test", "dev")

# Examples tokenized to measure lengths (evenly spread over the file); the rest are counted.
SAMPLE = 4000


def _gpu_types() -> dict[str, float]:
    """The cards `--gpu` takes: priced in the built-in table and with a known memory size."""
    from sweeper.cost import GPU_MEMORY_GIB, PRICE_TABLE

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
    is neither a built-in model, a model folder, a .gguf file (converted here, once), nor
    a Hub id the cache or the Hub has."""
    from trainables.gguf import is_gguf_name
    from trainables.sections import BUILTIN_MODELS, model_folder_problem

    if model.startswith("builtin:"):
        if model not in BUILTIN_MODELS:
            raise UserError(f"--model: no built-in model {model!r}; valid: {', '.join(BUILTIN_MODELS)}")
        from trainables.models import resolve_model_source

        return model, resolve_model_source(model)
    path = Path(model).expanduser()
    if path.exists() or model.startswith(("/", "./", "../", "~")) or model.count("/") > 1 or is_gguf_name(model):
        problem = model_folder_problem(path.resolve())
        if problem:
            raise UserError(f"--model: {problem}")
        from trainables.models import adapter_base

        folder = str(path.resolve())
        if is_gguf_name(folder):
            return folder, _converted(folder)
        return folder, adapter_base(folder) or folder
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", model):
        raise UserError(
            f"--model: {model!r} is neither a folder here nor a Hub id ORG/NAME; give a model folder "
            "(what save_pretrained wrote), a Hub id such as Qwen/Qwen2.5-0.5B-Instruct, or builtin:tiny-llama"
        )
    return model, model


def _converted(gguf_file: str) -> str:
    """The model folder a GGUF file converts to (once, into the cache), its errors keyed `--model`."""
    from trainables.errors import InputError
    from trainables.models import resolve_model_source

    try:
        return resolve_model_source(gguf_file)
    except InputError as exc:
        raise UserError(f"--model: {str(exc).removeprefix('model.name_or_path: ')}") from None


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

