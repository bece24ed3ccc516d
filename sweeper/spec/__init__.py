"""The sweep file: its typed schema (`SweepSpec`, the single source of defaults, help text
and the reference), how a YAML file is read into it (`load_spec`, `validate_spec`),
dotted-path overrides (`with_overrides`, `single_run_spec`), and the reference generated
from it (`markdown_reference`). Pure pydantic and YAML: no file checks beyond reading the
YAML, no Ray, torch or MLflow.

The private modules: `_schema` (`SweepSpec` and its cross-field rules), `_sections` (the
driver's own sections: search, early_stopping, tracking, storage, cost, budget), `_notify`
(the webhooks a sweep posts its events to, their URLs kept secret; `notify_problems`, each
url_env set), `_paths` (dotted paths into the file), `_load` (YAML file -> `SweepSpec`,
every problem as one keyed line), `_overrides`, `_reference`.
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "SweepSpec", "most_trials", "evaluates_on_start", "trials_text", "SearchSpec", "UniformDist", "LogUniformDist",
    "IntUniformDist", "CategoricalDist", "WarmStartSpec", "BudgetSpec", "MOST_TRIALS", "PRICE_TABLE",
    "REMOTE_SCHEMES", "default_grace_period", "is_remote", "uri_problem", "load_spec", "parse_yaml",
    "read_yaml", "revalidate_spec", "spec_hash", "spec_to_yaml", "validate_spec", "calibration_spec",
    "single_run_spec", "with_overrides", "section_model", "markdown_reference",
    "COST_METRICS", "picked_by", "prune_metric", "reported_every_evaluation", "conditional_value", "searched_paths",
    "searched_distributions",
    "NotifySpec", "WebhookSpec", "NOTIFY_EVENTS", "WITHHELD", "url_problem", "notify_problems",
    "is_grpo", "grpo_costliest", "grpo_generation_batch",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "SweepSpec": "_schema", "most_trials": "_schema", "evaluates_on_start": "_schema", "trials_text": "_schema",
    "SearchSpec": "_sections", "UniformDist": "_sections", "LogUniformDist": "_sections",
    "IntUniformDist": "_sections", "CategoricalDist": "_sections", "WarmStartSpec": "_sections",
    "BudgetSpec": "_sections", "MOST_TRIALS": "_sections", "PRICE_TABLE": "_sections",
    "REMOTE_SCHEMES": "_sections", "default_grace_period": "_sections", "is_remote": "_sections",
    "uri_problem": "_sections",
    "load_spec": "_load", "parse_yaml": "_load", "read_yaml": "_load", "revalidate_spec": "_load",
    "spec_hash": "_load", "spec_to_yaml": "_load", "validate_spec": "_load",
    "calibration_spec": "_overrides", "single_run_spec": "_overrides", "with_overrides": "_overrides",
    "section_model": "_paths",
    "markdown_reference": "_reference",
    "COST_METRICS": "_objectives",
    "picked_by": "_objectives",
    "prune_metric": "_objectives",
    "reported_every_evaluation": "_objectives",
    "conditional_value": "_paths",
    "searched_distributions": "_paths",
    "searched_paths": "_schema",
    "NotifySpec": "_notify", "WebhookSpec": "_notify", "NOTIFY_EVENTS": "_notify", "WITHHELD": "_notify",
    "url_problem": "_notify", "notify_problems": "_notify",
    "is_grpo": "_engines", "grpo_costliest": "_engines", "grpo_generation_batch": "_engines",
}

__getattr__ = lazy_getattr(__name__, _HOME)
