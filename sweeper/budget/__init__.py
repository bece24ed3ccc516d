"""The budget while a sweep runs (`SweepBudget`): the forecast logged, the live forecast
that replaces its figures by the sweep's own, and the caps enforced through Tune's public
searcher and stopper interfaces. What the caps mean before a sweep runs is
`sweeper.plan`'s; the `budget` section is `sweeper.spec`'s.

The private modules: `_sweep_budget` (`SweepBudget`, what the launch hooks in), `_guard`
(`BudgetGuard`, `BudgetSearcher`, `BudgetStopper`) and `_live_forecast` (`LiveForecast`,
a listener of the driver).
"""

from sweeper._lazy import lazy_getattr

__all__ = [
    "SweepBudget",
]

# Each public name's private module, imported on first use (sweeper/_lazy.py).
_HOME = {
    "SweepBudget": "_sweep_budget",
}

__getattr__ = lazy_getattr(__name__, _HOME)
