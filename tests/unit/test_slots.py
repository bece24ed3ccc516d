"""The slot schedule (sweeper/plan/slots.py): runs placed as Tune starts them."""

import pytest

from sweeper.plan import slots as slot_schedule
from sweeper.plan.slots import Segment, on_slots


def test_a_promotion_starts_once_its_gate_opens_not_when_the_rung_ends():
    # 6 first-rung runs of 1 s on 2 slots; the second segment's run (2 s) is promoted once 3
    # trials have arrived at the rung: at 2 s, before the rung's last 2 runs (2 to 3 s, 3 to 4 s).
    segments = [Segment([], 1.0, 6), Segment([], 2.0, 1, gates=[3])]
    end, runs = on_slots(segments, 2, 0.0)
    assert (2.0, 4.0) in runs  # the promoted run, before the new trials
    assert end == pytest.approx(4.0)  # the segment after the rung: 5 s


def test_a_slot_waits_for_the_arrival_that_opens_a_gate():
    # One trial running 3 s more in the first segment, nothing else to start there: the
    # promoted run (gate: 2 arrivals, one already in) waits on the free slot until 3 s.
    segments = [Segment([3.0], 1.0, 0, arrived=1), Segment([], 2.0, 1, gates=[2])]
    end, runs = on_slots(segments, 2, 0.0)
    assert runs == [(0.0, 3.0), (3.0, 5.0)] and end == 5.0


def test_a_large_schedule_is_placed_in_whole_rounds_close_to_the_exact_one(monkeypatch):
    segments = [Segment([], 1.0, 600), Segment([], 3.0, 200, gates=[3 * k for k in range(1, 201)])]
    exact, _ = on_slots(segments, 8, 0.0)
    monkeypatch.setattr(slot_schedule, "EXACT_RUNS", 100)
    rounds, _ = on_slots(segments, 8, 0.0)
    # The rounds put the promoted runs after the whole first rung: the end moves by a run at most.
    assert abs(rounds - exact) <= 3.0
    assert exact == pytest.approx((600 * 1.0 + 200 * 3.0) / 8, rel=0.05)


def test_a_gate_no_arrival_can_open_does_not_stall_the_schedule():
    # A live ladder counted short (failed trials): the second segment's run waits for 3
    # arrivals where only 1 trial is left to arrive; it starts when that one has.
    segments = [Segment([], 1.0, 1), Segment([], 2.0, 1, gates=[3])]
    end, runs = on_slots(segments, 2, 0.0)
    assert runs == [(0.0, 1.0), (1.0, 3.0)] and end == 3.0
    # Nothing at all before it: it starts at once rather than never.
    assert on_slots([Segment([], 1.0, 0), Segment([], 2.0, 1, gates=[1])], 1, 0.0)[0] == 2.0
