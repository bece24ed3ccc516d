"""Dataset reading and tokenization. Runs once per sweep on the driver; trials receive
the token ids through the Ray object store, so no trial tokenizes anything."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from trainables.config import TrialConfig
from trainables.errors import InputError
from trainables.sections import HubSplit

IGNORE_INDEX = -100
# The seed of the draw of data.eval_samples: fixed, so that a sweep, its resume, its
# confirmation runs and a later sweep of the same eval split evaluate the same rows.
EVAL_SAMPLE_SEED = 0


@dataclass(frozen=True)
class TokenizedSplit:
    """Token ids and loss labels (IGNORE_INDEX where no loss is taken), one row per example;
    `pad_id` fills the rows of a padded batch (see `padding_id`)."""

    input_ids: list[list[int]]
    labels: list[list[int]]
    pad_id: int | None = None

    def __len__(self) -> int:
        return len(self.input_ids)

    def rows(self, indices: list[int]) -> TokenizedSplit:
        return TokenizedSplit(
            [self.input_ids[i] for i in indices], [self.labels[i] for i in indices], padding_id(self)
        )

    @cached_property
    def unused_id(self) -> int:
        """The smallest id that occurs in none of the rows (worked out once)."""
        used = {token for row in self.input_ids for token in row}
        return next(token for token in range(len(used) + 1) if token not in used)

    @property
    def num_target_tokens(self) -> int:
        return sum(sum(1 for t in row if t != IGNORE_INDEX) for row in self.labels)


@dataclass(frozen=True)
class PreferenceSplit:
    """Preference pairs: row i of `chosen` and row i of `rejected` share their prompt;
    labels are IGNORE_INDEX on the prompt, so only the two answers are scored."""

    chosen: TokenizedSplit
    rejected: TokenizedSplit

    def __len__(self) -> int:
        return len(self.chosen)

    def rows(self, indices: list[int]) -> PreferenceSplit:
        return PreferenceSplit(self.chosen.rows(indices), self.rejected.rows(indices))


def padding_id(split: TokenizedSplit) -> int:
    """The id that fills a padded batch's rows past their length: the split's `pad_id`
    (the tokenizer's pad token), else the smallest id that occurs in none of its rows.
    It is never attended to nor learned: attention and loss masks come from each row's
    length (trainables/common.py), so a pad token that is also a real token (an eos that
    closes every chat turn) stays a real token inside the rows."""
    return split.pad_id if split.pad_id is not None else split.unused_id


def tokenizer_pad_id(tokenizer) -> int | None:
    """The tokenizer's pad token id (None where it has none)."""
    pad = getattr(tokenizer, "pad_token_id", None)
    return pad if isinstance(pad, int) else None


def read_jsonl(path: Path, key: str) -> list[tuple[int, dict]]:
    """(line number, record) for every non-blank line; errors name the YAML key, file and line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{key}: cannot read {path}: {exc}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{key}: {path} line {number}: invalid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InputError(f"{key}: {path} line {number}: expected a JSON object, got {type(record).__name__}")
        records.append((number, record))
    if not records:
        raise InputError(f"{key}: {path} is empty; give at least one example")
    return records


def read_records(path: Path | HubSplit, key: str) -> list[tuple[int, dict]]:
    """(line or row number, record) of a data split: a JSONL file, a Parquet file
    (`.parquet`), a folder written by `datasets` save_to_disk, or a Hub dataset's split.
    Errors name the YAML key."""
    if isinstance(path, HubSplit):
        rows = _hub_split_rows(path, key)
        if not rows:
            raise InputError(f"{key}: split {path.split!r} of the Hub dataset {path.repo_id} is empty; give at least one example")
        return list(enumerate(rows, start=1))
    path = Path(path)
    if path.is_dir():
        rows = _saved_dataset_rows(path, key)
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"{key}: cannot read {path} as Parquet: {_first_line(exc)}") from None
    else:
        return read_jsonl(path, key)
    if not rows:
        raise InputError(f"{key}: {path} is empty; give at least one example")
    return list(enumerate(rows, start=1))


def _saved_dataset_rows(folder: Path, key: str) -> list[dict]:
    import datasets

    try:
        dataset = datasets.load_from_disk(str(folder))
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise InputError(
            f"{key}: cannot read {folder} as a dataset written by save_to_disk: {_first_line(exc)}"
        ) from None
    if isinstance(dataset, datasets.DatasetDict):
        splits = ", ".join(str(folder / split) for split in dataset)
        raise InputError(f"{key}: {folder} holds several splits; give one split's folder: {splits}")
    return dataset.to_list()


def hub_dataset_folder(source: HubSplit, key: str) -> Path:
    """The Hub cache's snapshot of the dataset repo `source` names, fetched into the cache
    first when it is not there and the Hub can be reached: huggingface_hub's rules, the
    ones transformers follows for a model id (HF_HUB_CACHE, HF_HOME, HF_HUB_OFFLINE,
    HF_TOKEN). InputError, naming the id, when it is neither cached nor reachable.

    The cache is read first, as for a model (trainables.models.from_cache_first): asked
    online, a cached dataset went through huggingface_hub's five retries (about 25 s) at
    each read where the Hub did not answer; and one request decides whether the Hub
    answers before a download is tried."""
    from huggingface_hub import snapshot_download

    from trainables.models import hub_unreachable

    try:
        return Path(snapshot_download(source.repo_id, repo_type="dataset", local_files_only=True))
    except Exception:  # not in the cache (LocalEntryNotFoundError): from the Hub below
        pass
    unreachable = hub_unreachable()
    if unreachable:
        problem = f"not in the Hugging Face cache and the Hub cannot be reached ({unreachable})"
    else:
        try:
            return Path(snapshot_download(source.repo_id, repo_type="dataset"))
        except Exception as exc:  # huggingface_hub raises HTTP and network errors, ...
            problem = _first_line(exc).rstrip(".")
    raise InputError(
        f"{key}: cannot get the Hub dataset {source.repo_id} (from the Hub cache or the Hub): "
        f"{problem}; download it once with network access (or copy the Hub cache here), or give a local file"
    )


def _hub_split_rows(source: HubSplit, key: str) -> list[dict]:
    """The rows of one split of a Hub dataset, read from its cached files by
    `datasets.load_dataset`, which finds the split's files as for a Hub id (file names
    such as data/train-*.parquet, or the configs in its README)."""
    import datasets

    folder = hub_dataset_folder(source, key)
    try:
        dataset = datasets.load_dataset(str(folder), split=source.split)
    except (ValueError, FileNotFoundError, OSError) as exc:  # unknown split, no data files, unreadable files
        raise InputError(f"{key}: cannot read split {source.split!r} of the Hub dataset {source.repo_id}: {_first_line(exc)}") from None
    return dataset.to_list()


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def file_sha256(path: Path | HubSplit) -> str:
    """The hash of a data file, or of every file of a dataset folder (names and bytes);
    of a Hub dataset, its cached snapshot's files."""
    if isinstance(path, HubSplit):
        path = hub_dataset_folder(path, "data")
    if not path.is_dir():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def sft_example(record: dict, tokenizer, max_length: int, where: str) -> tuple[list[int], list[int]]:
    """Token ids and labels for one SFT example; loss only on the completion or on
    assistant turns. `where` ("data.train: file line N") prefixes any error."""
    if "messages" in record:
        ids, labels = _chat_example(record["messages"], tokenizer, where)
    elif "prompt" in record and "completion" in record:
        prompt = tokenizer(str(record["prompt"]), add_special_tokens=False)["input_ids"]
        completion = tokenizer(str(record["completion"]), add_special_tokens=False)["input_ids"]
        completion = completion + [tokenizer.eos_token_id]
        ids, labels = prompt + completion, [IGNORE_INDEX] * len(prompt) + completion
    else:
        raise InputError(f"{where}: expected 'messages' or 'prompt' and 'completion', got keys {sorted(record)}")
    return ids[:max_length], labels[:max_length]


def _chat_example(messages, tokenizer, where: str) -> tuple[list[int], list[int]]:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
        raise InputError(f"{where}: 'messages' must be a list of {{'role', 'content'}} objects")
    if not any(m["role"] == "assistant" for m in messages):
        raise InputError(f"{where}: 'messages' has no assistant turn to learn from")
    _require_chat_template(tokenizer, where)

    def render(turns, add_generation_prompt=False) -> list[int]:
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=add_generation_prompt)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    # Render the conversation turn by turn: each assistant turn is a target, everything
    # before it (including the template's assistant header) is context.
    ids: list[int] = []
    labels: list[int] = []
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            header = render(messages[:index], add_generation_prompt=True)[len(ids):]
            ids += header
            labels += [IGNORE_INDEX] * len(header)
            turn = render(messages[: index + 1])[len(ids):]
            labels += turn
        else:
            turn = render(messages[: index + 1])[len(ids):]
            labels += [IGNORE_INDEX] * len(turn)
        ids += turn
    return ids, labels


def _require_chat_template(tokenizer, where: str) -> None:
    if getattr(tokenizer, "chat_template", None) is None:
        raise InputError(
            f"{where}: chat messages need the tokenizer's chat template, and the tokenizer of "
            "model.name_or_path has none; give plain strings (prompt/completion, or prompt/chosen/rejected) "
            "or a chat model"
        )


def tokenize_sft(path: Path, tokenizer, max_length: int, key: str) -> TokenizedSplit:
    input_ids, labels = [], []
    for number, record in read_records(path, key):
        ids, target = sft_example(record, tokenizer, max_length, where=f"{key}: {path} line {number}")
        if any(t != IGNORE_INDEX for t in target):  # truncated past the answer: nothing to learn
            input_ids.append(ids)
            labels.append(target)
    if not input_ids:
        raise InputError(f"{key}: no example of {path} keeps a target token within data.max_length={max_length}")
    return TokenizedSplit(input_ids, labels, tokenizer_pad_id(tokenizer))


def preference_example(
    record: dict, tokenizer, max_length: int, max_prompt_length: int, where: str
) -> tuple[list[int], list[int], list[int]]:
    """Prompt, chosen and rejected token ids of one preference pair (EOS ends each answer).

    Plain strings are concatenated as prompt + answer (put any "Q:/A:" framing in the
    prompt); chat messages are rendered with the tokenizer's chat template, the prompt with
    the assistant header. The prompt keeps its last `max_prompt_length` tokens; answers
    are cut so that prompt + answer fits `max_length`."""
    missing = [key for key in ("prompt", "chosen", "rejected") if key not in record]
    if missing:
        raise InputError(
            f"{where}: missing {', '.join(repr(k) for k in missing)}; a preference line needs "
            f"'prompt', 'chosen' and 'rejected', got keys {sorted(record)}"
        )
    prompt, chosen, rejected = record["prompt"], record["chosen"], record["rejected"]
    if all(isinstance(part, str) for part in (prompt, chosen, rejected)):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answers = [
            tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            for answer in (chosen, rejected)
        ]
    elif all(_is_messages(part) for part in (prompt, chosen, rejected)):
        _require_chat_template(tokenizer, where)
        prompt_ids, answers = _chat_preference(prompt, [chosen, rejected], tokenizer)
    else:
        raise InputError(
            f"{where}: 'prompt', 'chosen' and 'rejected' must all be strings or all lists of "
            "{'role', 'content'} messages"
        )
    prompt_ids = prompt_ids[-max_prompt_length:]
    room = max_length - len(prompt_ids)
    return prompt_ids, answers[0][:room], answers[1][:room]


def _is_messages(value) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in value
    )


def _chat_preference(prompt: list[dict], answers: list[list[dict]], tokenizer) -> tuple[list[int], list[list[int]]]:
    """As trl renders conversational pairs: the answer is what the rendered conversation
    adds after the rendered prompt (with its assistant header)."""

    def render(turns, add_generation_prompt=False) -> list[int]:
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=add_generation_prompt)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompt_ids = render(prompt, add_generation_prompt=True)
    full = [render(prompt + answer) for answer in answers]
    shared = min(_common_prefix(prompt_ids, ids) for ids in full)
    return prompt_ids[:shared], [ids[shared:] for ids in full]


def _common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    while length < min(len(a), len(b)) and a[length] == b[length]:
        length += 1
    return length


def tokenize_preference(path: Path, tokenizer, max_length: int, max_prompt_length: int, key: str) -> PreferenceSplit:
    pad_id = tokenizer_pad_id(tokenizer)
    chosen, rejected = TokenizedSplit([], [], pad_id), TokenizedSplit([], [], pad_id)
    for number, record in read_records(path, key):
        where = f"{key}: {path} line {number}"
        prompt, chosen_ids, rejected_ids = preference_example(record, tokenizer, max_length, max_prompt_length, where)
        for split, answer in ((chosen, chosen_ids), (rejected, rejected_ids)):
            split.input_ids.append(prompt + answer)
            split.labels.append([IGNORE_INDEX] * len(prompt) + answer)
    return PreferenceSplit(chosen, rejected)


def draw_sample(count: int, available: int, seed: int) -> list[int]:
    """`count` indices of `available` rows (all of them where there are fewer), in order:
    the same draw for the same seed."""
    if count >= available:
        return list(range(available))
    return sorted(random.Random(seed).sample(range(available), count))


def eval_sample_rows(count: int | None, available: int) -> list[int] | None:
    """The indices of the eval split's rows that data.eval_samples keeps: `count` of the
    `available` tokenized rows, in order, drawn by EVAL_SAMPLE_SEED (all of them where
    there are fewer); None where data.eval_samples is unset (the whole split)."""
    return None if count is None else draw_sample(count, available, EVAL_SAMPLE_SEED)


def tokenize_split(config: TrialConfig, split: str, tokenizer) -> TokenizedSplit | PreferenceSplit:
    """data.<split> tokenized for the trial's task: SFT examples or DPO preference pairs."""
    path, key = getattr(config.data, split), f"data.{split}"
    if config.task == "dpo":
        return tokenize_preference(path, tokenizer, config.data.max_length, config.dpo.max_prompt_length, key)
    return tokenize_sft(path, tokenizer, config.data.max_length, key)
