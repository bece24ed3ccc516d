"""What a sweep optimises and what its rungs rank by: the checks of `search.metric` against
what the trials report (eval metrics at every evaluation, task metrics from generation at
the steps `generation.when` names), and the metric early stopping uses where the one the
search optimises is not reported at every evaluation.

Pure functions of a validated spec's sections: the schema's cross-field checks and the
search's scheduler both call them.
"""

from __future__ import annotations

from typing import Any

from trainables.reward_models import reward_name
from trainables.metrics import EVAL_LOSS, EVAL_REWARD, GRPO_METRICS, TASK_METRICS, reward_metric
from trainables.task_metrics import BUILTIN_SCORES, GENERATION_PREFIX, generation_metric, is_generation_metric

__all__ = [
    "COST_METRICS", "metric_problems", "generation_problems", "objectives_problems", "prune_metric",
    "reported_every_evaluation", "metric_goal", "picked_by", "rankable_metrics",
]

# Objectives worked out on the driver from a trial's wall time and config, not reported by
# it: what the trial cost, its accelerator-hours (GPU-hours; CPU core-hours without GPUs),
# and its adapter's LoRA parameters. Each is better lower.
COST_METRICS: dict[str, str] = {"cost_usd": "minimize", "accelerator_hours": "minimize", "adapter_parameters": "minimize"}

Problem = tuple[str, str]


def rankable_metrics(spec: Any) -> dict[str, str]:
    """Metric -> goal for what every evaluation of the sweep's trials reports: the task's,
    or for trl.method grpo the rewards (each reward function's eval_reward_<function> too)."""
    trl = getattr(spec, "trl", None)
    if spec.trainer != "trl" or trl is None or trl.method != "grpo":
        return TASK_METRICS[spec.task]
    functions = [reward_name(entry) for entry in trl.reward_funcs or []]
    return {**GRPO_METRICS, **{reward_metric(name): "maximize" for name in functions}}


def metric_goal(spec: Any, metric: str) -> str | None:
    """The direction that makes sense for `metric` (a gen_ metric: maximize for the
    built-in scores, None for a user scorer's: search.goal says)."""
    if metric in COST_METRICS:
        return COST_METRICS[metric]
    if is_generation_metric(metric):
        score = metric[len(GENERATION_PREFIX):]
        return "maximize" if score in BUILTIN_SCORES else None
    return rankable_metrics(spec).get(metric)


def metric_problems(spec: Any, key: str, metric: str, goal: str, goal_key: str) -> list[Problem]:
    """Whether the trials report `metric` (named at YAML key `key`) and `goal` (at
    `goal_key`) is its direction."""
    metrics = rankable_metrics(spec)
    if metric == EVAL_LOSS and EVAL_LOSS not in metrics:
        return [(key, f"a GRPO trial's loss is no measure of progress (with trl.beta 0 it stays near 0 while the "
                      f"model learns), so trials ranked by it are ranked at random; use {EVAL_REWARD} (goal maximize) "
                      f"or another of {', '.join(metrics)}")]
    if metric in COST_METRICS and spec.search.objectives:
        pass  # objectives_problems checks a cost objective
    elif is_generation_metric(metric):
        generation = spec.generation
        if generation is None:
            return [(key, f"{metric!r} is a task metric from generation, and the sweep has no generation section; "
                          f"add generation: {{scores: [{metric[len(GENERATION_PREFIX):]}]}} or use one of "
                          f"{', '.join(metrics)}")]
        score = metric[len(GENERATION_PREFIX):]
        if score in BUILTIN_SCORES and score not in generation.scores and generation.scorer is None:
            named = ", ".join(generation_metric(s) for s in generation.scores) or "none"
            return [(key, f"{metric!r} is not among generation.scores ({named}); add {score} to generation.scores")]
        if score not in BUILTIN_SCORES and generation.scorer is None:
            return [(key, f"{metric!r} is no built-in score ({', '.join(map(generation_metric, BUILTIN_SCORES))}) "
                          "and generation.scorer is not set; name a built-in score or give generation.scorer")]
    elif metric not in metrics:
        valid = [*metrics, *(generation_metric(s) for s in BUILTIN_SCORES)]
        return [(key, f"{metric!r} is not reported by task {spec.task!r}; valid: {', '.join(valid)}")]
    expected = metric_goal(spec, metric)
    if expected is not None and goal != expected:
        better = "lower" if expected == "minimize" else "higher"
        return [(goal_key, f"{metric} is better when {better}, got {goal!r}; set {goal_key}: {expected}")]
    return []


def generation_problems(spec: Any) -> list[Problem]:
    """The generation section applies to the built-in SFT loop, and early_stopping.metric
    must be reported at every evaluation."""
    problems: list[Problem] = []
    if spec.generation is not None and (spec.task != "sft" or spec.trainer != "builtin"):
        problems.append(("generation", f"generates in the built-in SFT loop only (task: sft, trainer: builtin), got "
                                       f"task {spec.task!r}, trainer {spec.trainer!r}; remove the section"))
    chosen = spec.early_stopping.metric
    if chosen is not None:
        if chosen not in rankable_metrics(spec) and not (is_generation_metric(chosen) and _every_eval(spec)):
            problems.append(("early_stopping.metric", f"the rungs rank by a metric reported at every evaluation, got "
                                                      f"{chosen!r}; valid: {', '.join(rankable_metrics(spec))}"))
    return problems


def _every_eval(spec: Any) -> bool:
    return spec.generation is not None and spec.generation.when == "every_eval"


def reported_every_evaluation(spec: Any, metric: str) -> bool:
    """Whether every evaluation's report carries `metric` (a cost metric: no report does)."""
    if metric in COST_METRICS:
        return False
    return not is_generation_metric(metric) or _every_eval(spec)


def prune_metric(spec: Any) -> tuple[str, str]:
    """(metric, goal) the early-stopping rungs rank trials by: early_stopping.metric where
    given; else search.metric where every evaluation reports it; else eval loss, the
    cheaper metric every evaluation reports, so that a task metric generated only at the
    end (or at the rungs) still decides which configs the search keeps."""
    chosen = spec.early_stopping.metric
    if chosen is None:
        chosen = spec.search.metric if reported_every_evaluation(spec, spec.search.metric) else EVAL_LOSS
    if chosen == spec.search.metric:
        return chosen, spec.search.goal
    return chosen, metric_goal(spec, chosen) or spec.search.goal


def objectives_problems(spec: Any) -> list[Problem]:
    """search.objectives: two or more, each a metric the trials report (or a cost metric)
    in its direction, none twice; the first picks the best trial and ranks the rungs, so
    it is a reported metric, not a cost."""
    objectives = spec.search.objectives
    if not objectives:
        return confirm_problems(spec)
    if len(objectives) == 1:
        return [("search.objectives", "give two or more objectives; for one, set search.metric and search.goal")]
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, objective in enumerate(objectives):
        key = f"search.objectives.{index}"
        if objective.metric in seen:
            problems.append((f"{key}.metric", f"{objective.metric!r} is an objective already; name each once"))
        seen.add(objective.metric)
        if index == 0:
            continue  # search.metric and goal, checked as such
        if objective.metric in COST_METRICS:
            if objective.goal != COST_METRICS[objective.metric]:
                problems.append((f"{key}.goal", f"{objective.metric} is better when lower, got {objective.goal!r}; "
                                                f"set goal: minimize"))
        else:
            problems += metric_problems(spec, f"{key}.metric", objective.metric, objective.goal, f"{key}.goal")
    first = objectives[0].metric
    if first in COST_METRICS:
        problems.append(("search.objectives.0.metric", f"the first objective picks the best trial and is what early "
                         f"stopping ranks trials by, and {first} is none of a trial's reports (every trial at a rung "
                         "has trained as long); put a reported metric first, e.g. eval_loss, and the cost after it"))
    if spec.search.warm_start:
        problems.append(("search.warm_start", "an earlier sweep's study holds one value per trial; with "
                         "search.objectives remove search.warm_start"))
    return problems + confirm_problems(spec)


def confirm_problems(spec: Any) -> list[Problem]:
    """search.confirm: a trial count to leave room for the reruns, at most that many
    configs to confirm, and the seed left for confirmation to set."""
    confirm, search = spec.search.confirm, spec.search
    if confirm is None:
        return []
    if search.num_trials is None:
        return [("search.confirm", "a sweep without search.num_trials searches until a budget cap and leaves "
                                   "nothing for the reruns; give search.num_trials, or remove search.confirm")]
    problems: list[Problem] = []
    if confirm.top > search.num_trials:
        problems.append(("search.confirm.top", f"must be <= search.num_trials ({search.num_trials}), got "
                                               f"{confirm.top}; lower it or raise search.num_trials"))
    if "training.seed" in search.parameters:
        problems.append(("search.parameters.training.seed", "search.confirm sets training.seed for its reruns; "
                         "remove training.seed from search.parameters, or remove search.confirm"))
    return problems


def picked_by(spec: Any) -> str:
    """The comment that opens best_config.yaml: the metric that picked the best trial and,
    with several objectives, that it is the first of them and where the front is."""
    line = f"# The best trial of sweep {spec.name} by search.metric {spec.search.metric} ({spec.search.goal})"
    if not spec.search.objectives:
        return line + ".\n"
    others = ", ".join(f"{o.metric} ({o.goal})" for o in spec.search.objectives[1:])
    return (line + f", the first of search.objectives; the others: {others}.\n"
            f"# Every trial of the Pareto front: sweep status {spec.name}; register one: sweep promote {spec.name} --trial N\n")
