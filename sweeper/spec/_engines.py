"""The cross-field checks of the trial engines (trainer: trl or function) that read more
of the sweep than the engine's own section: what the chosen engine cannot do
(trainables/engines.py::engine_problems), the trl methods a search may mix, and a GRPO
sweep's (trl.method: grpo) defaults and batch rules.

A GRPO sweep's search.metric defaults to the mean eval reward (maximize): its loss is no
measure of progress. No config it runs or a search may draw (a `conditional` branch's
values with the top-level ones) breaks the batch rules of trl's GRPOConfig
(trainables/grpo.py), so that no trial fails on them. Pure functions of
the raw YAML or a validated spec.
"""

from __future__ import annotations

from typing import Any

from sweeper.spec._paths import _NO_VALUE, conditional_value, searched_distributions
from sweeper.spec._sections import CategoricalDist, IntUniformDist
from trainables.engines import METHOD_TASK, engine_problems, trl_config_fields
from trainables.grpo import BATCH_FIELDS, batch_problems, range_values, space_problem
from trainables.metrics import EVAL_REWARD, EVAL_REWARDS_ACCURACY
from trainables.sections import DpoSpec

__all__ = ["engine_section_problems", "grpo_defaults", "is_grpo", "grpo_costliest", "grpo_generation_batch",
           "GRPO_COST_FIELDS"]

Problem = tuple[str, str]


def is_grpo(spec: Any) -> bool:
    return spec.trainer == "trl" and spec.trl is not None and spec.trl.method == "grpo"


# GRPOConfig's fields that the cost of a GRPO step and evaluation reads (the throughput
# model, sweeper/cost/_throughput.py): the group size, the completions' length, how often a
# generation batch is sampled and how often it is trained on, and the KL term (beta > 0: a
# reference model scores every completion).
GRPO_COST_FIELDS = ("num_generations", "num_generations_eval", "max_completion_length", "steps_per_generation",
                    "generation_batch_size", "num_iterations", "beta")


def grpo_costliest(spec: Any) -> dict[str, Any]:
    """GRPO_COST_FIELDS of the costliest config a GRPO sweep runs: trl.<field> where given
    (its largest value where searched, at the top level or in a conditional branch), else
    GRPOConfig's default."""
    fields, defaults = spec.trl.fields, trl_config_fields("grpo")
    values = {name: fields.get(name, defaults[name].default) for name in GRPO_COST_FIELDS}
    for name in GRPO_COST_FIELDS:
        # Every value a search may draw (a conditional branch's too); a range too wide to
        # list (or a float range): its top.
        drawn = [v for dist in searched_distributions(spec.search.parameters, f"trl.{name}")
                 for v in (_drawn_values(dist) or [getattr(dist, "high", None)])
                 if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if drawn:
            values[name] = max(drawn)
    return values


def grpo_generation_batch(spec: Any, grpo: dict[str, Any], micro_batches: int) -> int:
    """Completions one worker samples at a time, of `grpo` (`grpo_costliest`'s values):
    trl.generation_batch_size over the workers (the batch rules keep it divisible), else
    the micro-batch x trl.steps_per_generation, which defaults to a step's `micro_batches`."""
    if grpo["generation_batch_size"] is not None:
        return grpo["generation_batch_size"] // spec.resources.workers_per_trial
    return spec.training.per_device_batch_size * (grpo["steps_per_generation"] or micro_batches)


def grpo_defaults(raw: Any) -> Any:
    """The raw YAML with search.metric eval_reward (goal maximize) for a GRPO sweep that
    names no metric."""
    if not isinstance(raw, dict) or raw.get("trainer") != "trl":
        return raw
    trl, search = raw.get("trl"), raw.get("search", {})
    if not isinstance(trl, dict) or trl.get("method") != "grpo" or not isinstance(search, dict):
        return raw
    if "metric" in search or "objectives" in search:
        return raw
    return {**raw, "search": {**search, "metric": EVAL_REWARD, "goal": search.get("goal", "maximize")}}


def engine_section_problems(spec: Any) -> list[Problem]:
    problems = engine_problems(
        spec.trainer, spec.task, spec.trl, spec.function,
        given={name for name in ("trl", "function") if getattr(spec, name) is not None},
        searched=list(spec.search.parameters), strategy=spec.resources.strategy,
        quantization=spec.model.quantization, fault=spec.chaos.fault,
    )
    if spec.trainer == "trl" and spec.trl is not None and spec.trl.method == "kto" and spec.search.metric == EVAL_REWARDS_ACCURACY:
        problems.append(("search.metric", "trl's KTOTrainer reports no eval_rewards_accuracy (its pairs are unpaired); "
                                          "use eval_loss, eval_rewards_margin or eval_rewards_chosen"))
    problems += _searched_method_problems(spec) + _grpo_batch_problems(spec)
    if spec.cost.calibrate and spec.trainer == "function":
        problems.append((
            "cost.calibrate",
            "the calibration times a trial's first steps from the training time its loop reports "
            "(train_seconds, or train_tokens and tokens_per_second), which a function reports only if it chooses "
            "to; set cost.calibrate: false (the forecast then comes from the throughput model)",
        ))
    if spec.trainer == "trl" and spec.dpo is not None:
        # A rebuilt spec sets every field; only a value other than the default is the user's.
        defaults = DpoSpec()
        problems += [
            (f"dpo.{name}", f"the built-in loop's; with trainer trl set trl.{name} (a field of trl's config)")
            for name in ("beta", "loss_type") if getattr(spec.dpo, name) != getattr(defaults, name)
        ]
    return problems


def _searched_method_problems(spec: Any) -> list[Problem]:
    """A search over trl.method picks among the methods of one task's data, grpo never."""
    searched = spec.search.parameters.get("trl.method")
    if spec.trainer != "trl" or not isinstance(searched, CategoricalDist):
        return []
    key = "search.parameters.trl.method"
    if "grpo" in searched.values:
        return [(key, "grpo trains on prompts and reward functions (trl.reward_funcs), not on the data of the other "
                      "methods; set trl.method: grpo once, without searching it")]
    other_task = [str(m) for m in searched.values if METHOD_TASK.get(str(m)) != spec.task]
    if not other_task:
        return []
    trains_on = "chat or prompt/completion examples (task sft)" if spec.task != "sft" else "preference pairs (task dpo)"
    return [(key, f"{', '.join(other_task)} train(s) on {trains_on}, not on task {spec.task}'s data; search the "
                  "methods of one task: sft alone, or among dpo, kto, orpo, cpo, simpo")]


def _grpo_batch_problems(spec: Any) -> list[Problem]:
    """GRPO's batch rules for the fixed values, or for every combination of the searched
    ones: the top-level parameters, and each `conditional` branch that searches a batch
    field with them (its categorical at the branch's value)."""
    if not is_grpo(spec):
        return []
    fields, defaults = spec.trl.fields, trl_config_fields("grpo")
    fixed = {
        "training.per_device_batch_size": spec.training.per_device_batch_size,
        "training.gradient_accumulation_steps": spec.training.gradient_accumulation_steps,
        **{path: fields.get(name, defaults[name].default) for path in BATCH_FIELDS
           if (name := path.removeprefix("trl.")) != path},
    }
    workers = spec.resources.workers_per_trial
    parameters = spec.search.parameters
    top = {path: _drawn_values(dist) for path, dist in parameters.items() if path in BATCH_FIELDS}
    problems, top_only = [], True  # top_only: whether some trial draws no branch that sets a batch field
    for parent, dist in parameters.items():
        branches = _batch_branches(dist)
        if not branches:
            continue
        top_only = top_only and len(branches) < len(dist.values)
        if parent in top and top[parent] is not None:  # a value with a branch is checked with it
            top[parent] = [v for v in top[parent] if v not in branches]
        for value, (given, searched) in branches.items():
            drawn = {**top, **({parent: [value]} if parent in BATCH_FIELDS else {}), **searched}
            problem = space_problem(fixed, drawn, workers)
            if problem:
                problems.append((f"search.parameters.{parent}.conditional.{given}.{next(iter(searched))}", problem))
    if not top_only:
        return problems
    if not top:
        return batch_problems(fixed, workers) + problems
    problem = space_problem(fixed, top, workers)
    return ([(f"search.parameters.{next(iter(top))}", problem)] if problem else []) + problems


def _batch_branches(dist: Any) -> dict[Any, tuple[Any, dict[str, list[Any] | None]]]:
    """A categorical's values whose `conditional` branch searches a batch field: value ->
    (its key in the YAML, batch field -> the values the branch may draw)."""
    if not isinstance(dist, CategoricalDist) or not dist.conditional:
        return {}
    branches = {}
    for given, parameters in dist.conditional.items():
        value = conditional_value(dist, given)
        searched = {path: _drawn_values(nested) for path, nested in parameters.items() if path in BATCH_FIELDS}
        if searched and value is not _NO_VALUE:  # a key that names no value is keyed by _conditional_problems
            branches[value] = (given, searched)
    return branches


def _drawn_values(dist: Any) -> list[Any] | None:
    """Every value a search may draw from `dist`, or None for a range too wide to try."""
    if isinstance(dist, CategoricalDist):
        return list(dist.values)
    if isinstance(dist, IntUniformDist):
        return range_values(dist.low, dist.high, dist.step)
    return None
