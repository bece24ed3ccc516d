"""The budget while a sweep runs (`SweepBudget`): the forecast logged, the live forecast
that replaces its figures by the sweep's own, and the caps enforced through Tune's public
searcher and stopper interfaces. What the caps mean before a sweep runs is
`sweeper.plan`'s; the `budget` section is `sweeper.spec`'s.

The private modules: `_sweep_budget` (`SweepBudget`, what the launch hooks in), `_guard`
(`BudgetGuard`, `BudgetSearcher`, `BudgetStopper`) and `_live_forecast` (`LiveForecast`,
a listener of the driver).
"""

from importlib import import_module

__all__ = [
    "SweepBudget",
]

# Each public name's private module, imported on first use (PEP 562): importing the package
# loads none of them, so a light command pays only for what it uses.
_HOME = {
    "SweepBudget": "_sweep_budget",
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
