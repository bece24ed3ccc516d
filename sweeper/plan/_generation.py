"""The sweep's generation sample, drawn once on the driver with the tokenized data: the
same prompts, references and generation steps for every trial (`generation.when`: every
evaluation, the plan's rungs and max_steps, or max_steps only). A user scorer is imported
and called once here, on the references as answers, so that one that does not import or
returns no number, and a search.metric it does not report, stop the sweep before any
trial starts."""

from __future__ import annotations

import importlib.util

from sweeper.errors import UserError
from sweeper.plan._sweep_plan import plan_rungs
from sweeper.spec import SweepSpec
from trainables.task_metrics import GenerationSample, build_sample, is_generation_metric, scorer_metric_names

__all__ = ["generation_sample"]


def generation_sample(spec: SweepSpec, tokenizer) -> GenerationSample | None:
    """What every trial answers and when; None without a generation section."""
    generation = spec.generation
    if generation is None:
        return None
    if "chrf" in generation.scores and importlib.util.find_spec("sacrebleu") is None:
        raise UserError("generation.scores: chrf is sacrebleu's; pip install 'sacrebleu>=2.6', or leave chrf out")
    steps = None if generation.when == "every_eval" else frozenset(plan_rungs(spec) if generation.when == "rungs" else ())
    sample = build_sample(generation, spec.data.eval, tokenizer, spec.data.max_length, steps)
    reported = scorer_metric_names(generation, sample.references, sample.rows)
    for key, metric in (("search.metric", spec.search.metric), ("early_stopping.metric", spec.early_stopping.metric)):
        if metric is not None and is_generation_metric(metric) and metric not in reported:
            raise UserError(f"{key}: {metric!r} is not reported by the generation section; it reports {', '.join(reported)}")
    return sample
