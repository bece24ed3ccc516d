"""The driver's watchdog: when trials are running but none has reported for a while, say
what the cluster is waiting on, so that a user sees why a sweep stands still (a
placement group that cannot be placed, actors waiting for a node, nothing free).

"A while" is stated and measured: three times the longest gap yet seen between two
reports of one trial (its evaluation interval on this machine, a trial's start
included), and never under a minute. What the cluster waits on goes to the sweep's
`driver.log` and under the live table, again each such while the silence lasts."""

from __future__ import annotations

import time
from pathlib import Path

from ray.tune import Callback

from sweeper.cluster import waiting_lines

__all__ = ["StallWatchdog", "STALL_FLOOR_S"]

STALL_FLOOR_S = 60.0
STALL_GAPS = 3


class StallWatchdog(Callback):
    """Tune callback on the driver. `live_table` shows the last finding (see
    sweeper/track/_console.py); `log_path` is appended to."""

    def __init__(self, live_table, log_path: Path, floor_s: float = STALL_FLOOR_S, clock=time.monotonic):
        self.live_table, self.log_path, self.floor_s, self.clock = live_table, log_path, floor_s, clock
        self.last_heard = clock()  # the latest report or trial start
        self.heard_from: dict[str, float] = {}  # trial id -> its latest report or start
        self.longest_gap = 0.0
        self.next_look = None  # when to look again while the silence lasts

    @property
    def stall_seconds(self) -> float:
        return max(self.floor_s, STALL_GAPS * self.longest_gap)

    def on_trial_start(self, iteration, trials, trial, **info):
        self._heard(trial.trial_id, report=False)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._heard(trial.trial_id, report=True)

    def _heard(self, trial_id: str, report: bool) -> None:
        now = self.clock()
        if report and trial_id in self.heard_from:
            self.longest_gap = max(self.longest_gap, now - self.heard_from[trial_id])
        self.heard_from[trial_id] = self.last_heard = now
        if self.next_look is not None:
            self.next_look = None
            self.live_table.waiting(None)

    def on_step_end(self, iteration, trials, **info):
        running = [trial for trial in trials if trial.status == "RUNNING"]
        now = self.clock()
        if not running or now - self.last_heard < self.stall_seconds:
            return
        if self.next_look is not None and now < self.next_look:
            return
        self.next_look = now + self.stall_seconds
        self.report_stall(now - self.last_heard, len(running), waiting_lines())

    def report_stall(self, silent_s: float, running: int, lines: list[str]) -> None:
        heading = f"no trial has reported for {silent_s:.0f} s while {running} run; the cluster:"
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with open(self.log_path, "a") as log:
            log.write(f"{stamp} {heading}\n" + "".join(f"  {line}\n" for line in lines))
        self.live_table.waiting([heading, *lines])

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks with the experiment state; the table is runtime-only.
        return {**self.__dict__, "live_table": None, "clock": None}
