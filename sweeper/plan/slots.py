"""The slot schedule of the forecast's arithmetic (sweeper/plan/forecast.py): runs of known
length placed on the sweep's slots as the sweep would start them, and the stretches in
which some slots stand idle, where the runs still going train faster (the cores are
theirs alone)."""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass

__all__ = ["Segment", "on_slots", "with_idle_slots", "EXACT_RUNS"]

# Schedules of more runs than this are placed segment after segment in whole rounds (a
# sweep until a budget cap is counted at up to a million trials, each count a schedule):
# each segment's runs after the segment before has ended. That moves the end by about one
# run per segment either way, a share of the wall time under segments x slots / EXACT_RUNS.
EXACT_RUNS = 5_000


@dataclass(frozen=True)
class Segment:
    """The work of one segment of the ladder (from one milestone to the next) still to do."""

    rests: list[float]  # the running trials' seconds left in it, from now
    seconds: float  # a run still to start: its seconds on its slot
    missing: int  # runs still to start
    arrived: int = 0  # trials already at its end milestone (or past it)
    # For each run still to start, in order: how many trials must have arrived at the
    # milestone where it begins before it can start (None: none, it starts on a free slot).
    gates: list[int] | None = None


def on_slots(segments: list[Segment], slots: int, ready_at: float) -> tuple[float, list[tuple[float, float]]]:
    """(when the last run ends, each run's (start, end) on its slot): the running trials'
    rests on their slots from now, and every run still to start on the slot free first, as
    Tune starts them. A slot that frees takes a promoted run whose gate has opened first
    (the earliest opened), else a new first-segment run, else it waits for the next
    arrival that opens a gate. Every slot is free from `ready_at` (the first wave's cold
    start before launch)."""
    if sum(segment.missing for segment in segments) > EXACT_RUNS:
        return _segment_after_segment(segments, slots, ready_at)
    runs = [(0.0, rest) for segment in segments for rest in segment.rests]
    free = sorted([rest for _, rest in runs] + [ready_at] * max(0, slots - len(runs)))
    # Arrival times at each segment's end milestone, sorted; placed runs add theirs.
    arrivals = [sorted([0.0] * segment.arrived + segment.rests) for segment in segments]
    totals = [segment.arrived + len(segment.rests) + segment.missing for segment in segments]
    placed = [0] * len(segments)

    def opens(index: int) -> float | None:
        """When the next run of segment `index` may start (None: not known yet)."""
        gates = segments[index].gates
        if index == 0 or gates is None:
            return 0.0
        before = arrivals[index - 1]
        needed = max(1, min(gates[placed[index]], totals[index - 1]))
        return before[needed - 1] if len(before) >= needed else None

    while any(placed[i] < segment.missing for i, segment in enumerate(segments)):
        at = heapq.heappop(free)
        pending = [(opens(i), i) for i, segment in enumerate(segments) if placed[i] < segment.missing]
        known = [(when, i) for when, i in pending if when is not None]
        # A promoted run before a new trial; among promoted ones the gate opened first (the
        # latest segment at a tie).
        ready = [(i == 0, when, -i, i) for when, i in known if when <= at]
        if not ready and known:  # wait for the next arrival that opens a gate
            heapq.heappush(free, min(when for when, _ in known))
            continue
        if not ready:  # no arrival left that could open one (a ladder counted short): start now
            ready = [(i == 0, at, -i, i) for _, i in pending]
        index = min(ready)[3]
        end = at + segments[index].seconds
        runs.append((at, end))
        bisect.insort(arrivals[index], end)
        heapq.heappush(free, end)
        placed[index] += 1
    return max([ready_at if not runs else 0.0, *(end for _, end in runs)]), runs


def _segment_after_segment(segments: list[Segment], slots: int, ready_at: float) -> tuple[float, list[tuple[float, float]]]:
    """`on_slots` for a schedule of more than EXACT_RUNS runs: each segment's runs on the
    slot free first once the segment before has ended. A slot's whole rounds of runs count
    as one (start, end)."""
    running = [rest for segment in segments for rest in segment.rests]
    runs = [(0.0, rest) for rest in running]
    free = sorted(running + [ready_at] * max(0, slots - len(running)))
    ended = 0.0  # when the segment before ended
    for segment in segments:
        seconds = segment.seconds
        last = max([ended, *segment.rests])
        left = segment.missing
        while left > 0:
            starts = [max(free_at, ended) for free_at in free]
            if left >= len(free) and max(starts) - min(starts) <= seconds:
                # Slots free within one run of each other take the runs in turn, one each
                # per round: whole rounds at once (a sweep until a budget cap is counted at
                # up to a million trials).
                rounds = left // len(free)
                free = sorted(start + rounds * seconds for start in starts)
                runs += [(start, start + rounds * seconds) for start in starts]
                last = max(last, free[-1])
                left -= rounds * len(free)
                continue
            start = max(heapq.heappop(free), ended)
            heapq.heappush(free, start + seconds)
            runs.append((start, start + seconds))
            last = max(last, start + seconds)
            left -= 1
        ended = last
    return (max([ended, *free]) if free else ended), runs


def with_idle_slots(end: float, runs: list[tuple[float, float]], slots: int, alone_ratio: float) -> tuple[float, float]:
    """(wall time, trial-seconds saved): the schedule's `end` with each stretch in which
    only k of the `slots` hold a run (0 < k < slots) shortened to the runs' speed there,
    alone_ratio with one, 1 with all slots busy, in between by the share of slots idle.
    Every run going then speeds up alike, so the order of ends is kept and each stretch
    simply shrinks: on the 2-core machine a sweep's last trials, alone, trained 60 steps in
    1.22 s against 1.5 s beside another, and the live ETA read up to 27 % high near the end."""
    if slots < 2 or alone_ratio == 1.0:
        return end, 0.0
    changes: dict[float, int] = {}
    for start, stop in runs:
        changes[start] = changes.get(start, 0) + 1
        changes[stop] = changes.get(stop, 0) - 1
    wall, saved, busy, since = 0.0, 0.0, 0, 0.0
    for at in sorted(changes):
        stretch = at - since
        ratio = 1.0 - (1.0 - alone_ratio) * (slots - busy) / (slots - 1) if 0 < busy < slots else 1.0
        wall += stretch * ratio
        saved += busy * stretch * (1.0 - ratio)
        busy, since = busy + changes[at], at
    return wall + max(0.0, end - since), saved
