"""The one place where sweeper uses private parts of MLflow. Each entry says what it relies on
and why no public API does it; tests/unit/test_mlflow_adapter.py checks that behaviour, so an
MLflow upgrade that changes it fails there, not in a sweep. Nothing is imported at module
level: MLflow is loaded by the entry that uses it.

Used by sweeper/promote/_registry.py:
- `model_name_problem`, `alias_problem`: MLflow's own checks of a registered-model name
  and alias, which it has only as private validators.
"""

from __future__ import annotations

__all__ = ["model_name_problem", "alias_problem"]


def model_name_problem(name: str) -> str | None:
    """What MLflow finds wrong with `name` as a registered-model name, or None."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_model_name

    try:
        _validate_model_name(name)
    except MlflowException as exc:
        return exc.message
    return None


def alias_problem(alias: str) -> str | None:
    """What MLflow finds wrong with `alias` as a model-version alias (reserved names such
    as `latest` and `v3` included), or None."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_model_alias_name, _validate_model_alias_name_reserved

    try:
        _validate_model_alias_name(alias)
        _validate_model_alias_name_reserved(alias)
    except MlflowException as exc:
        return exc.message
    return None
