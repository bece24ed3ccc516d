"""GRPO with trl (trainer: trl, trl.method: grpo): the prompts a trial samples from, the
user's reward functions, and the batch rules of trl's `GRPOConfig`.

- Rows: a chat row's prompt is every turn before its last assistant turn, and that turn's
  text is its reference answer; a prompt/completion row's prompt and completion are
  prompt and reference. Each reward function gets the references as the column
  `reference` (trl passes every dataset column but the prompt to the reward functions).
- Reward functions: `trl.reward_funcs`, each `FILE.py:FUNCTION`, called by trl as
  FUNCTION(prompts, completions, reference=[...], **kwargs) -> list of float or None, or
  a reward model (a hub id or local folder of a sequence-classification model with one
  label), which trl loads itself and scores each prompt + completion with
  (trainables/reward_models.py). Before any trial each is imported (loaded) and called
  once on a few eval rows, with the references as completions, so that one that does not
  import, fails or returns no number stops the sweep with one keyed line.
- Batch rules (`GRPOConfig.__post_init__`): the generation batch (micro-batch x workers x
  steps_per_generation, which defaults to the gradient accumulation; or
  generation_batch_size) holds whole groups of num_generations completions, at least two;
  the eval batch (micro-batch x workers) holds whole groups of num_generations_eval
  (default num_generations). `batch_problems` checks one config; `space_problem` every
  combination a search may draw.

Pure Python at import: the schema and the driver import it without torch or trl.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from trainables.errors import InputError
from trainables.reward_models import is_function_entry
from trainables.task_metrics import load_scorer

__all__ = [
    "REFERENCE_COLUMN", "GRPO_EVAL_SAMPLES", "BATCH_FIELDS", "grpo_row", "grpo_rows",
    "reward_functions", "reward_function_problems", "batch_problems", "space_problem", "range_values",
]

REFERENCE_COLUMN = "reference"
# data.eval_samples where a GRPO sweep leaves it unset: every evaluation samples a group of
# completions for each of its rows (rollouts, most of a GRPO step's time), so the whole
# split is rarely affordable.
GRPO_EVAL_SAMPLES = 16

# The values the batch rules read: the sweep's own keys and trl's fields.
BATCH_FIELDS = (
    "training.per_device_batch_size", "training.gradient_accumulation_steps", "trl.num_generations",
    "trl.num_generations_eval", "trl.generation_batch_size", "trl.steps_per_generation",
)
# Values of an integer range tried one by one for the batch rules; a wider range is refused.
_MOST_VALUES = 64


def grpo_row(record: dict, where: str) -> dict:
    """{prompt, reference} of one row of the data section (chat, or prompt/completion)."""
    if "messages" in record:
        messages = record["messages"]
        last = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
                   default=None)
        if last is None or last == 0:
            raise InputError(f"{where}: a GRPO prompt is every turn before the last assistant turn, and this row "
                             "has none before it (or no assistant turn)")
        return {"prompt": list(messages[:last]), REFERENCE_COLUMN: str(messages[last].get("content", ""))}
    if "prompt" in record:
        return {"prompt": str(record["prompt"]), REFERENCE_COLUMN: str(record.get("completion", ""))}
    raise InputError(f"{where}: expected 'messages' or 'prompt' (and 'completion' as the reference), got keys "
                     f"{sorted(record)}")


def grpo_rows(records: Sequence[tuple[int, dict]], key: str) -> list[dict]:
    """The rows of a split (`read_records`' (line number, record) pairs) as GRPO prompts."""
    return [grpo_row(record, f"{key} line {number}") for number, record in records]


def reward_functions(entries: Sequence[str]) -> list[Callable | str]:
    """What GRPOTrainer takes for `trl.reward_funcs`: each function imported (InputError
    keyed by position), each reward model by its id or folder, which trl loads."""
    return [load_scorer(entry, f"trl.reward_funcs.{index}") if is_function_entry(entry) else entry
            for index, entry in enumerate(entries)]


def reward_function_problems(entry_points: Sequence[str], rows: Sequence[dict],
                             trl_fields: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Each reward function imported and called on `rows` (GRPO rows) with their references
    as completions, in the form trl passes them: (key, problem) for one that does not
    import, fails, or returns anything but one number (or None) per completion with at
    least one number. A reward model is loaded as trl loads it (with `trl_fields`, the trl
    section's model_init_kwargs, trust_remote_code, chat_template_kwargs) and scores them (trainables/reward_models.py)."""
    problems = []
    prompts = [row["prompt"] for row in rows]
    references = [row[REFERENCE_COLUMN] for row in rows]
    completions = [[{"role": "assistant", "content": r}] if isinstance(p, list) else r
                   for p, r in zip(prompts, references)]
    for index, entry_point in enumerate(entry_points):
        key = f"trl.reward_funcs.{index}"
        if not is_function_entry(entry_point):
            from trainables.reward_models import reward_model_problem

            problem = reward_model_problem(entry_point, prompts, completions, trl_fields or {})
            if problem:
                problems.append((key, problem))
            continue
        try:
            function = load_scorer(entry_point, key)
        except InputError as exc:
            problems.append((key, str(exc).removeprefix(f"{key}: ")))
            continue
        try:
            values = function(prompts=prompts, completions=completions, completion_ids=[[] for _ in rows],
                              **{REFERENCE_COLUMN: references}, trainer_state=None,
                              log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None)
        except Exception as exc:  # the user's function
            problems.append((key, f"calling it on {len(rows)} eval rows (the references as completions) failed: "
                                  f"{type(exc).__name__}: {exc}"))
            continue
        problem = _values_problem(values, len(rows))
        if problem:
            problems.append((key, f"{problem}; a reward function returns one float (or None) per completion"))
    return problems


def _values_problem(values: Any, count: int) -> str | None:
    if not isinstance(values, (list, tuple)):
        return f"returned {type(values).__name__} {values!r:.60}, not a list"
    if len(values) != count:
        return f"returned {len(values)} values for {count} completions"
    numbers = [v for v in values if v is not None]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in numbers):
        return f"returned a value that is no number: {next(v for v in numbers if not isinstance(v, (int, float)))!r:.60}"
    if not numbers:
        return "returned no number (only None)"
    return None


def batch_problems(values: dict[str, Any], workers: int) -> list[tuple[str, str]]:
    """The GRPO batch rules `values` (BATCH_FIELDS -> value; trl's fields as given, else
    GRPOConfig's defaults) break: (the key to change, the rule and the values)."""
    micro, accumulation = values["training.per_device_batch_size"], values["training.gradient_accumulation_steps"]
    generations = values["trl.num_generations"]
    generations_eval = values["trl.num_generations_eval"] or generations
    given_batch, steps = values["trl.generation_batch_size"], values["trl.steps_per_generation"]
    problems = []
    if generations < 2:
        problems.append(("trl.num_generations", f"must be >= 2 (a group of one completion has no advantage), "
                                                f"got {generations}"))
    if given_batch is not None and steps is not None:
        problems.append(("trl.steps_per_generation", "trl.generation_batch_size and trl.steps_per_generation "
                                                     "cannot both be set; set one"))
        return problems
    global_batch = micro * workers
    if given_batch is not None:
        if given_batch % global_batch:
            problems.append(("trl.generation_batch_size", f"must be divisible by the global batch "
                             f"(training.per_device_batch_size {micro} x {workers} workers = {global_batch}), "
                             f"got {given_batch}"))
        generation_batch = given_batch
    else:
        generation_batch = global_batch * (steps or accumulation)
    if generations >= 2 and generation_batch % generations:
        made_of = ("trl.generation_batch_size" if given_batch is not None else
                   f"training.per_device_batch_size {micro} x {workers} workers x "
                   + (f"trl.steps_per_generation {steps}" if steps else f"training.gradient_accumulation_steps {accumulation}"))
        problems.append(("trl.num_generations", f"the generation batch ({made_of} = {generation_batch}) must be "
                         f"divisible by trl.num_generations ({generations}): each prompt's group of completions "
                         "is whole"))
    if generations_eval >= 1 and global_batch % generations_eval:
        key = "trl.num_generations_eval" if values["trl.num_generations_eval"] else "trl.num_generations"
        problems.append((key, f"the eval batch (training.per_device_batch_size {micro} x {workers} workers = "
                              f"{global_batch}) must be divisible by the eval generations ({key}: "
                              f"{generations_eval})"))
    return problems


def space_problem(fixed: dict[str, Any], searched: dict[str, list[Any] | None], workers: int) -> str | None:
    """Why a search over `searched` (path -> the values it may draw, None for a range too
    wide to try) could draw a config that breaks a batch rule, naming the first such
    combination; None where every combination meets them."""
    wide = [path for path, values in searched.items() if values is None]
    if wide:
        return (f"{', '.join(wide)}: a range of more than {_MOST_VALUES} values; the GRPO batch rules are checked for "
                "every value a search may draw: search it as categorical values")
    paths = list(searched)
    for combination in itertools.product(*(searched[p] for p in paths)):
        drawn = dict(zip(paths, combination))
        broken = batch_problems({**fixed, **drawn}, workers)
        if broken:
            named = ", ".join(f"{p}={v}" for p, v in drawn.items())
            return (f"a trial could draw {named}, and then {broken[0][0]}: {broken[0][1]}; search values that meet "
                    "the rule in every combination (e.g. batch sizes that are multiples of each num_generations)")
    return None


def range_values(low: int, high: int, step: int = 1) -> list[int] | None:
    """Every integer of an int_uniform range, or None where there are more than the batch
    rules try one by one."""
    count = (high - low) // step + 1
    return list(range(low, high + 1, step)) if count <= _MOST_VALUES else None
