"""After a sweep: the best trial (or one named) registered in the MLflow Model Registry
(`promote_trial`), or written as a YAML that trains it as one full run (`export_trial`)."""

from importlib import import_module

__all__ = [
    "promote_trial", "export_trial",
]

# Each public name's private module, imported on first use (PEP 562): importing the package
# loads none of them, so a light command pays only for what it uses.
_HOME = {
    "promote_trial": "_registry",
    "export_trial": "_export",
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
