"""sweeper: hyperparameter sweeps for LLM fine-tuning (Ray Tune + Optuna + ASHA).

The Python API (`sweeper.api`) is loaded on first use, so that `import sweeper` stays
light (no Ray, torch or MLflow): `sweeper.start(...)`, `sweeper.status(name)`,
`sweeper.sweeps()`, `sweeper.report(name)`."""

from __future__ import annotations

__all__ = ["start", "sweeps", "status", "report"]


def __getattr__(name: str):
    if name in __all__:
        from sweeper import api

        return getattr(api, name)
    raise AttributeError(f"module 'sweeper' has no attribute {name!r}")
