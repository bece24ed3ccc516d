"""After a sweep: the best trial (or one named) registered in the MLflow Model Registry
(`promote_trial`), or written as a YAML that trains it as one full run (`export_trial`)."""

from sweeper._lazy import lazy_getattr

__all__ = ["promote_trial", "export_trial"]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {"promote_trial": "_registry", "export_trial": "_export"}

__getattr__ = lazy_getattr(__name__, _HOME)
