"""What a sweep optimises and what its rungs rank by: the checks of `search.metric` against
what the trials report (eval metrics at every evaluation, task metrics from generation at
the steps `generation.when` names), and the metric early stopping uses where the one the
search optimises is not reported at every evaluation.

Pure functions of a validated spec's sections: the schema's cross-field checks and the
search's scheduler both call them.
"""

from __future__ import annotations

from typing import Any

from trainables.metrics import EVAL_LOSS, TASK_METRICS
from trainables.task_metrics import BUILTIN_SCORES, GENERATION_PREFIX, generation_metric, is_generation_metric

__all__ = ["metric_problems", "generation_problems", "prune_metric", "reported_every_evaluation", "metric_goal"]

Problem = tuple[str, str]


def metric_goal(spec: Any, metric: str) -> str | None:
    """The direction that makes sense for `metric` (a gen_ metric: maximize for the
    built-in scores, None for a user scorer's: search.goal says)."""
    if is_generation_metric(metric):
        score = metric[len(GENERATION_PREFIX):]
        return "maximize" if score in BUILTIN_SCORES else None
    return TASK_METRICS[spec.task].get(metric)


def metric_problems(spec: Any, key: str, metric: str, goal: str, goal_key: str) -> list[Problem]:
    """Whether the trials report `metric` (named at YAML key `key`) and `goal` (at
    `goal_key`) is its direction."""
    metrics = TASK_METRICS[spec.task]
    if is_generation_metric(metric):
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
        if chosen not in TASK_METRICS[spec.task] and not (is_generation_metric(chosen) and _every_eval(spec)):
            problems.append(("early_stopping.metric", f"the rungs rank by a metric reported at every evaluation, got "
                                                      f"{chosen!r}; valid: {', '.join(TASK_METRICS[spec.task])}"))
    return problems


def _every_eval(spec: Any) -> bool:
    return spec.generation is not None and spec.generation.when == "every_eval"


def reported_every_evaluation(spec: Any, metric: str) -> bool:
    """Whether every evaluation's report carries `metric`."""
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
