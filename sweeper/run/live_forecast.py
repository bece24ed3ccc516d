"""The live forecast while `sweep start` runs: a listener of the driver callback
(sweeper/run/driver.py) that measures every trial's steps, evaluations, Train-run starts
(less the first wave's cold start, which the forecast counts apart) and stops, and each
freed slot's turnaround to the next run, from the driver's events as it receives them, re-estimates what is left of the
sweep at each evaluation (sweeper/plan/live.py), shows it under the live table, logs it on
the parent run (`forecast_remaining_s`, ... at step = evaluations seen) and hands the
budget guard its figures (sweeper/run/budget_guard.py).

The times are the driver's: a report's interval is from the trial's previous report (or
its Train run's start) to this one's arrival, so the driver's loop, MLflow logging, Ray's
own processes and the trials' neighbours are in them, as they are in the sweep's cost.
"""

from __future__ import annotations

import time

from sweeper.cost.prices import Rate
from sweeper.cost.throughput import TrialTiming
from sweeper.names import LiveForecastKey, TrialState
from sweeper.plan.forecast import Forecast, TrialAt
from sweeper.plan.live import LiveEstimate, Measured, estimate, rescaled
from sweeper.plan.sweep_plan import SweepPlan
from sweeper.time_share import TimeShare
from trainables.metrics import STEP, TOKENS_PER_SECOND, TRAIN_TOKENS

__all__ = ["LiveForecast"]


class LiveForecast:
    """Measures as trials report and keeps `latest`, the sweep's live estimate."""

    # An estimate walks every trial's position and the sweep's whole ladder (10-20 ms in
    # a sweep of 2,000 trials, 2 ms in one of 200), and the driver's events come 4-5 times
    # a trial: estimating at each made the driver's work per trial grow with the sweep
    # (benchmarks/README.md, Load). So estimates take at most this share of the time since
    # the first; an event between two shows and logs the latest, and the measured figures
    # (what the budget guard commits trials at) are current at every report.
    ESTIMATE_SHARE = 0.05
    # The estimates' time, made at the first (a sweep pickled by an earlier version has none).
    _estimates: TimeShare | None = None

    def __init__(self, plan: SweepPlan, forecast: Forecast, book, rate: Rate, tracker=None, table=None, clock=time.time):
        self.plan, self.forecast, self.book, self.rate = plan, forecast, book, rate
        self.tracker, self.table, self.clock = tracker, table, clock
        self.measured = Measured()
        self.evaluations = 0  # reports seen: the step of the parent run's forecast metrics
        self.logged = False
        self.latest: LiveEstimate | None = None
        # trial id -> (when its Train run started or it last reported, the step then, no report
        # yet in this run, the run is in the first wave, no other trial was running then)
        self._since: dict[str, tuple] = {}
        self._runs = 0  # Train runs started: the first wave's start cold
        self._freed: list[float] = []  # when runs ended or paused, their slot not yet taken again

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks (the driver and its listeners) with the experiment.
        return {**self.__dict__, "tracker": None, "table": None, "book": None, "clock": None}

    # ------------------------------------------------------------ the driver's events

    def trial_started(self, record) -> None:
        now = self.clock()
        if self._freed:
            self.measured.add_turnaround(now - self._freed.pop(0))
        # The first wave's runs start cold; the forecast counts that apart (cold_start_seconds).
        cold = self._runs < self.plan.concurrent_trials
        self._runs += 1
        self._since[record.trial_id] = (now, record.step, True, cold, self._alone())
        # The calibrated forecast, logged once at step 0 before anything is measured.
        self.update(log=not self.logged)

    def trial_result(self, record) -> None:
        now = self.clock()
        report = record.history[-1]
        # (A sweep resumed from an earlier version's pickle has no fifth field.)
        at, step, first, cold, *alone_then = self._since.get(record.trial_id, (now, record.step, False, False, False))
        alone = bool(alone_then and alone_then[0]) and self._alone()
        steps = int(report.get(STEP, step)) - step
        tokens, per_second = report.get(TRAIN_TOKENS), report.get(TOKENS_PER_SECOND)
        if steps > 0 and tokens and per_second:
            training = tokens / per_second  # the loop's own training time (per worker)
            if first:
                # The run's start: all but its steps and one evaluation (the estimate's so far).
                self.measured.add_start(steps, training, now - at - training - self.timing().eval_seconds, cold=cold)
            else:
                self.measured.add_interval(steps, training, now - at - training, alone=alone)
        self._since[record.trial_id] = (now, int(report.get(STEP, step)), False, False, self._alone())
        self.evaluations += 1
        self.update()

    def trial_paused(self, record) -> None:
        self._run_ended(record)

    def trial_finished(self, record) -> None:
        self._run_ended(record)

    def _run_ended(self, record) -> None:
        """A Train run ended (the trial paused at a rung, or finished): from its last report
        to now is its stop; its slot is free for the next run."""
        now = self.clock()
        since = self._since.pop(record.trial_id, None)
        if since is not None and not since[2]:
            self.measured.add_stop(now - since[0])
        if since is not None:
            self._freed.append(now)
        self.update(log=False)

    # ------------------------------------------------------------ the estimate

    def timing(self) -> TrialTiming:
        """The forecast's timing (the mean config's) updated by what was measured."""
        from sweeper.plan.live import PriorWeight, live_timing

        return live_timing(self.forecast.timing, self.measured, PriorWeight.of(self.forecast))

    def costliest_timing(self) -> TrialTiming:
        """The costliest config's calibrated timing corrected as the mean config's was: what
        the budget guard commits new and running trials at."""
        return rescaled(self.forecast.costliest or self.forecast.timing, self.forecast.timing, self.timing())

    def current(self) -> LiveEstimate:
        trials = list(self.book.trials.values())
        positions = [
            TrialAt(t.step, t.state == TrialState.RUNNING and not self._waiting_at_rung(t), t.startup_trial)
            for t in trials
            if t.state != TrialState.FAILED
        ]
        spent = self.rate.trial_cost(sum(t.wall_seconds for t in trials))
        return estimate(
            self.plan, self.forecast, self.measured, positions,
            failed=sum(1 for t in trials if t.state == TrialState.FAILED),
            elapsed_seconds=self.clock() - self.book.started_at,
            spent_usd=spent.usd,
            spent_accelerator_hours=spent.accelerator_hours,
            spent_steps=sum(t.step for t in trials),
        )

    def _alone(self) -> bool:
        """No trial but one is running, in a sweep of more slots than one."""
        running = sum(1 for t in self.book.trials.values() if t.state == TrialState.RUNNING) if self.book else 0
        return self.plan.concurrent_trials > 1 and running == 1

    def _waiting_at_rung(self, record) -> bool:
        """The trial has just reported at a rung and waits for the scheduler there: most
        trials are paused or stopped at a rung, so the estimate does not count it as
        training on into the next segment. Counted so, the estimate fell by one of that
        segment's runs at every rung report, then rose again: the total read 238 s and
        257 s in turn in a 251 s sweep (benchmarks/README.md, issue 36). An unranked trial
        goes on from every rung."""
        since = self._since.get(record.trial_id)
        reported_last = since is not None and not since[2]
        return reported_last and not record.startup_trial and record.step in self.plan.rungs

    def update(self, log: bool = True) -> LiveEstimate | None:
        """Re-estimate (within ESTIMATE_SHARE); show the estimate under the table; at an
        evaluation, log it on the parent run."""
        if self.book is None:
            return None
        self._estimates = self._estimates or TimeShare()
        if self.latest is None or self._estimates.allows(self.ESTIMATE_SHARE, self.clock()):
            started = self.clock()
            self.latest = self.current()
            self._estimates.add(started, self.clock())
        if self.table is not None:
            self.table.forecast(self.latest.line())
        if log and self.tracker is not None:
            self.tracker.log_sweep_metrics(self.metrics(), step=self.evaluations)
            self.logged = True
        return self.latest

    def metrics(self) -> dict[str, float]:
        e = self.latest
        return {
            LiveForecastKey.REMAINING_SECONDS: e.left.wall_seconds,
            LiveForecastKey.REMAINING_USD: e.left.usd,
            LiveForecastKey.TOTAL_SECONDS: e.total_seconds,
            LiveForecastKey.TOTAL_USD: e.total_usd,
            LiveForecastKey.ELAPSED_SECONDS: e.elapsed_seconds,
            LiveForecastKey.SPENT_USD: e.spent_usd,
            LiveForecastKey.STEPS_DONE: float(sum(t.step for t in self.book.trials.values())),
            LiveForecastKey.STEP_SECONDS: e.timing.step_seconds,
            LiveForecastKey.EVAL_SECONDS: e.timing.eval_seconds,
            LiveForecastKey.SETUP_SECONDS: e.timing.setup_seconds,
        }
