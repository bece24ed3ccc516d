"""The budget while a sweep runs: the forecast printed and logged, the live forecast that
replaces its figures by the sweep's own, and the caps enforced through Tune's public
searcher and stopper interfaces. What the caps mean before a sweep runs is
`sweeper.plan` (`plan/caps.py`); the `budget` section is `sweeper.spec`'s."""

from sweeper.budget._sweep_budget import SweepBudget

__all__ = ["SweepBudget"]
