"""The forecast and the budget while `sweep start` runs: the forecast calibrated, printed
and logged to the parent run; the caps enforced through a searcher wrapper and a stopper
(sweeper/budget/_guard.py); at the end, forecast against actual and what the caps
cut, on the parent run and in the summary. Every MLflow write goes through the tracker."""

from __future__ import annotations

import time

from rich.console import Console

from sweeper.plan.command import print_forecast, sweep_forecast
from sweeper.plan.forecast import Forecast
from sweeper.plan.inputs import SweepInputs
from sweeper.plan.sweep_plan import SweepPlan
from sweeper.spec.schema import SweepSpec

__all__ = ["SweepBudget"]


class SweepBudget:
    def __init__(self, spec: SweepSpec, plan: SweepPlan, forecast: Forecast | None, guard=None):
        self.spec, self.plan, self.forecast, self.guard = spec, plan, forecast, guard
        self.live = None  # the live forecast (sweeper/budget/_live_forecast.py), once attached

    @classmethod
    def forecast_sweep(cls, plan: SweepPlan, inputs: SweepInputs, console: Console) -> "SweepBudget":
        """Calibrate on the cluster (unless cost.calibrate is false: the throughput model)
        and print the forecast (before the sweep's clock starts; Ray is up)."""
        forecast = sweep_forecast(plan, inputs if plan.spec.cost.calibrate else None)
        print_forecast(forecast, plan.spec, console, brief=True)
        return cls(plan.spec, plan, forecast)

    def attach(self, book, tracker) -> None:
        """Log the forecast to the parent run (`forecast_*` params); the live forecast
        measured on `book` and logged by `tracker`; caps measured on `book` and judged at
        the live figures."""
        from sweeper.cost.prices import sweep_rate
        from sweeper.budget._guard import make_guard
        from sweeper.budget._live_forecast import LiveForecast

        tracker.log_sweep_params(self.forecast.as_params())
        self.live = LiveForecast(self.plan, self.forecast, book, sweep_rate(self.spec), tracker)
        self.guard = make_guard(self.spec, self.plan, book, self.forecast, self.live)

    def listeners(self, table) -> list:
        """The driver's listeners for the live forecast (none for a resumed sweep, which has
        no forecast of its own), showing it on `table`; before the table among them."""
        if self.live is None:
            return []
        self.live.table = table
        return [self.live]

    def reattach(self, search_alg, stopper, book):
        """For `sweep resume`: the guard that Tune restored with the searcher and stopper
        (pickled without a book) now measures on the resumed `book`. Returns the searcher
        inside the budget's wrapper (the sweep's own, whose state the caller rebuilds)."""
        from sweeper.budget._guard import BudgetSearcher, BudgetStopper

        if isinstance(stopper, BudgetStopper):
            self.guard = stopper.guard
        if isinstance(search_alg, BudgetSearcher):
            self.guard = self.guard or search_alg.guard
            search_alg.guard = self.guard  # one guard, as when the sweep started
            search_alg = search_alg.searcher
        if self.guard is not None:
            self.guard.book = book
        return search_alg

    def searcher(self, search_alg):
        """The search algorithm, wrapped so that no trial starts past a cap."""
        if self.guard is None or search_alg is None:
            return search_alg
        from sweeper.budget._guard import BudgetSearcher

        return BudgetSearcher(search_alg, self.guard)

    def stopper(self):
        """The RunConfig stopper that ends the sweep at a cap (None without a budget)."""
        if self.guard is None:
            return None
        from sweeper.budget._guard import BudgetStopper

        return BudgetStopper(self.guard)

    def cut(self) -> bool:
        """True when a cap ended the sweep early (it is not an interrupted sweep)."""
        return self.guard is not None and self.guard.cut()

    def finish(self, tracker, run) -> None:
        """Forecast against actual (a resumed sweep has no forecast of its own: the first
        driver logged it), and what the caps cut, on the parent run and in the summary."""
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
