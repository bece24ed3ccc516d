"""Work held to a share of the driver's time: work whose cost grows with the sweep (Tune's
state saved before new trials start, sweeper/search/tune_state.py; the live forecast's
estimate, sweeper/run/live_forecast.py) runs only while it has taken at most a share of
the wall time since it was first done, so the driver's work per trial stays bounded as
trials accumulate. The rest of the time the caller skips it, or uses its last result."""

from __future__ import annotations

__all__ = ["TimeShare"]


class TimeShare:
    """The time some work has taken since it was first done."""

    def __init__(self) -> None:
        self.since: float | None = None  # when it was first done
        self.spent = 0.0

    def allows(self, share: float, now: float) -> bool:
        """It has taken at most `share` of the time from its first run to `now`."""
        return self.since is None or self.spent <= share * (now - self.since)

    def add(self, started: float, ended: float) -> None:
        """One run of the work, from `started` to `ended`."""
        if self.since is None:
            self.since = started
        self.spent += ended - started
