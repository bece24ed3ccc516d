"""The forecast and the budget while `sweep start` runs: the forecast on the parent run, the
live forecast, the caps enforced (sweeper/budget/_guard.py), and at the end the forecast
against the actual and what the caps cut. Every MLflow write goes through the tracker."""

from __future__ import annotations

import time

from sweeper.plan import Forecast, SweepPlan

__all__ = ["SweepBudget"]


class SweepBudget:
    """A running sweep's forecast, live forecast and guard, each None where there is none (a
    resumed sweep has no forecast of its own; its guard comes back with Tune's searcher)."""

    def __init__(self, forecast: Forecast | None = None, live=None, guard=None):
        self.forecast, self.live, self.guard = forecast, live, guard

    @classmethod
    def start(cls, plan: SweepPlan, forecast: Forecast, tracker) -> "SweepBudget":
        """A new sweep's budget: the forecast logged as `forecast_*` params; the live forecast
        and the caps measured on the tracker's book."""
        from sweeper.budget._guard import make_guard
        from sweeper.budget._live_forecast import LiveForecast
        from sweeper.cost import sweep_rate

        tracker.log_sweep_params(forecast.as_params())
        live = LiveForecast(plan, forecast, tracker.book, sweep_rate(plan.spec), tracker)
        return cls(forecast, live, make_guard(plan.spec, plan, tracker.book, forecast, live))

    def listeners(self, table) -> list:
        """The driver's listeners for the live forecast, showing it on `table`."""
        if self.live is None:
            return []
        self.live.table = table
        return [self.live]

    def guarded(self, search_alg, stopper, book):
        """The searcher and stopper Tune runs with, inside the caps, measured on `book`: a new
        sweep's searcher wrapped and a stopper added; a resumed sweep's as Tune restored them,
        one guard for both, measuring on the resumed book. Without a budget, as given."""
        from sweeper.budget._guard import BudgetSearcher, BudgetStopper

        if isinstance(stopper, BudgetStopper):
            self.guard = stopper.guard
        if isinstance(search_alg, BudgetSearcher):
            self.guard = self.guard or search_alg.guard
            search_alg.guard = self.guard
        elif self.guard is not None and search_alg is not None:
            search_alg = BudgetSearcher(search_alg, self.guard)
        if self.guard is not None:
            self.guard.book = book
            stopper = stopper or BudgetStopper(self.guard)
        return search_alg, stopper

    def cut(self) -> bool:
        """True when a cap ended the sweep early (it is not an interrupted sweep)."""
        return self.guard is not None and self.guard.cut()

    def cap_line(self, ended: bool) -> str | None:
        """The line the summary gives the caps (`Budget: ...`), once a cap is reached or has
        stopped a trial at a rung; once the sweep `ended`, also once trials were held back
        for good. None until then, and without a budget."""
        guard = self.guard
        if guard is None or not (guard.reached_cap or guard.held_at_rung or ended):
            return None
        return guard.summary()

    def finish(self, tracker, run) -> None:
        """Forecast against actual, and what the caps cut, on the parent run and in the summary."""
        actual_wall = time.time() - run.book.started_at  # the trials' phase
        metrics, tags = {}, {}
        if self.forecast is not None:
            metrics = self.forecast.ending_metrics()
        if self.guard is not None:
            tags, budget_metrics = self.guard.as_tags_and_metrics()
            metrics.update(budget_metrics)
        if metrics or tags:
            tracker.log_sweep_figures(metrics, tags)
        if self.forecast is not None:
            expected = self.forecast.expected
            run.notes.append(
                f"Forecast: {expected.wall_seconds:.0f} s, ${expected.usd:.6f} expected; actual: {actual_wall:.0f} s "
                f"(trials' phase), ${run.cost.usd:.6f}"
            )
        if self.guard is not None and self.guard.summary():
            run.notes.append(f"Budget: {self.guard.summary()}")
