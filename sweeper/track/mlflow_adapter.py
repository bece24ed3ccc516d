"""The one place where sweeper uses private parts of MLflow. Each entry says what it relies on
and why no public API does it; tests/unit/test_mlflow_adapter.py checks that behaviour, so an
MLflow upgrade that changes it fails there, not in a sweep. Nothing is imported at module
level: MLflow is loaded by the entry that uses it.

Used by sweeper/promote/registry.py and sweeper/track/mlflow_store.py:
- `model_name_problem`, `alias_problem`: MLflow's own checks of a registered-model name
  and alias, which it has only as private validators.
- `build_empty_mlflow_store`: the tables of a new SQLite store at MLflow's latest schema,
  without the Default experiment MLflow adds when it opens a store (its path depends on
  who opens it). MLflow does this only inside the store's constructor, which also adds
  that experiment; `mlflow db upgrade` needs the tables to exist.
"""

from __future__ import annotations

__all__ = ["model_name_problem", "alias_problem", "build_empty_mlflow_store"]


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


def build_empty_mlflow_store(database) -> None:
    """A SQLite file at `database` with MLflow's tables at its latest schema and no rows of
    ours (MLflow adds its Default experiment on opening it)."""
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    engine = sqlalchemy.create_engine(f"sqlite:///{database}")
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()
