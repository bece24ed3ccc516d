"""The budget while a sweep runs (`SweepBudget`): the forecast logged, the live forecast
(`_live_forecast`) and the caps enforced through Tune's searcher and stopper interfaces
(`_guard`). What the caps mean before a sweep runs is `sweeper.plan`'s."""

from sweeper._lazy import lazy_getattr

__all__ = ["SweepBudget"]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {"SweepBudget": "_sweep_budget"}

__getattr__ = lazy_getattr(__name__, _HOME)
