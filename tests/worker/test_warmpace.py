"""A stop's warm pace (``worker.warmpace``): how many warm handoffs at once, how many more
once the phase has a pace, and which streams no offer will reach; pure arithmetic."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from holdfast.worker.warmpace import (
    WARM_AT_ONCE_AT_STOP,
    WARM_AT_ONCE_LEAST,
    WARM_PACE_AFTER_MS,
    beyond_warm_reach,
    warm_at_once,
    warm_pace,
    warm_slots,
)

_COUNTS = st.integers(0, 20_000)
_MS = st.integers(0, 120_000)


def test_no_stream_is_given_up_on_without_a_pace_or_time() -> None:
    """No offer begun, no slot time yet, or no time left: every stream keeps its turn."""
    assert beyond_warm_reach(900, 0, 10_000, 1_300, 20) == 0
    assert beyond_warm_reach(900, 40, 0, 1_300, 20) == 0
    assert beyond_warm_reach(900, 40, 20_000, 0, 20) == 0


def test_the_tail_beyond_the_paces_reach_is_released_now() -> None:
    """1,000 streams, 20 offers begun by 20 slots in 0.5 s, 1.3 s left: about 98 can still
    go warm."""
    # 20 / 500 ms x 1,300 ms x 1.5 = 78, plus the 20 in flight: 98 reachable of 900 waiting.
    assert beyond_warm_reach(900, 20, 20 * 500, 1_300, 20) == 802
    assert beyond_warm_reach(90, 20, 20 * 500, 1_300, 20) == 0


def test_a_long_warm_phase_reaches_every_stream() -> None:
    """The stack's 25 s budget: 12 s of warm phase reach a worker's 100 streams, though
    none of the first 20 offers, begun at once, has ended yet."""
    assert beyond_warm_reach(80, 20, 20 * 500, 11_500, 20) == 0
    assert beyond_warm_reach(80, 21, 20 * 2_000, 10_000, 20) == 0


def test_a_small_stop_hands_over_few_at_once_and_a_large_one_many() -> None:
    """100 streams in a 12 s warm phase go 6 at once (each slot reaches 18 in 3/4 of it, and
    the one in flight), 300 go 16; 1,000 in 1.8 s at the most, 20; none at all, or no phase
    left, never below the least or above the most."""
    assert warm_at_once(100, 12_000) == 6
    assert warm_at_once(300, 12_000) == 16
    assert warm_at_once(1_000, 1_800) == WARM_AT_ONCE_AT_STOP
    assert warm_at_once(0, 12_000) == WARM_AT_ONCE_LEAST
    assert warm_at_once(100, 0) == WARM_AT_ONCE_AT_STOP
    assert WARM_AT_ONCE_LEAST < WARM_AT_ONCE_AT_STOP


def test_a_stop_keeps_its_few_warm_offers_while_they_reach_the_queue() -> None:
    """6 in flight, 8 begun in 0.5 s, 92 waiting, 11.5 s left: 6 will do; no pace yet, or
    no time left: as it was."""
    assert warm_slots(92, 8, 6 * 500, 11_500, 6) == 6
    assert warm_slots(92, 0, 0, 11_500, 6) == 6
    assert warm_slots(92, 8, 3_000, 0, 6) == 6


def test_a_slow_pace_adds_warm_offers_up_to_the_most() -> None:
    """One offer per second per slot, 6 s left: each slot reaches 4 (3 in half the time left,
    and the one in flight), so 60 waiting need 15; 900 waiting in 1 s: the most, 20; never
    fewer than already in flight."""
    assert warm_slots(60, 6, 6_000, 6_000, 6) == 15
    assert warm_slots(900, 6, 6_000, 1_000, 6) == WARM_AT_ONCE_AT_STOP
    assert warm_slots(10, 6, 6_000, 6_000, 12) == 12


def test_the_warm_phase_keeps_its_slots_and_queue_until_it_has_a_pace() -> None:
    """0.4 s into a stop whose first 20 offers have not ended (a pace that reaches 98 of 900
    waiting): 20 at once and nothing drained; from 0.5 s on: the most and the tail beyond."""
    assert warm_pace(400, 900, 20, 20 * 400, 1_300, at_once=20) == (20, 0)
    assert WARM_AT_ONCE_AT_STOP == 20
    assert warm_pace(500, 900, 20, 20 * 500, 1_300, at_once=20) == (20, 802)
    assert warm_pace(500, 60, 6, 6_000, 6_000, at_once=6) == (15, 0)


@given(streams=_COUNTS, more=st.integers(0, 5_000), phase_ms=_MS, longer_ms=_MS)
def test_at_once_stays_in_bounds_and_grows_with_the_stop_and_shrinks_with_its_time(
        streams: int, more: int, phase_ms: int, longer_ms: int) -> None:
    """Never below the least nor above the most; more streams never fewer at once, a longer
    phase never more (with some phase left)."""
    at_once = warm_at_once(streams, phase_ms)
    assert WARM_AT_ONCE_LEAST <= at_once <= WARM_AT_ONCE_AT_STOP
    assert warm_at_once(streams + more, phase_ms) >= at_once
    if phase_ms > 0:
        assert warm_at_once(streams, phase_ms + longer_ms) <= at_once


@given(waiting=_COUNTS, offered=_COUNTS, slot_ms=_MS, left_ms=_MS,
       at_once=st.integers(WARM_AT_ONCE_LEAST, WARM_AT_ONCE_AT_STOP), elapsed_ms=_MS)
def test_the_pace_never_lowers_the_slots_nor_drains_more_than_wait(
        waiting: int, offered: int, slot_ms: int, left_ms: int, at_once: int,
        elapsed_ms: int) -> None:
    """Whatever the pace: the slots stay between those in flight and the most, the streams
    drained now between none and those waiting, and before the pace is taken nothing
    changes."""
    slots, drained = warm_pace(elapsed_ms, waiting, offered, slot_ms, left_ms, at_once=at_once)
    assert at_once <= slots <= WARM_AT_ONCE_AT_STOP
    assert 0 <= drained <= waiting
    assert warm_slots(waiting, offered, slot_ms, left_ms, at_once) >= at_once
    if elapsed_ms < WARM_PACE_AFTER_MS:
        assert (slots, drained) == (at_once, 0)


def test_the_smallest_pace_and_time_left_still_count() -> None:
    """One offer begun, a 1 ms slot time or 1 ms left is a pace to judge by, not "no pace
    yet": only zeros keep every stream's turn and the slots as they are."""
    assert beyond_warm_reach(900, 1, 500, 1_300, 20) == 802  # 20 x (1,300 x 1.5 / 500 + 1)
    assert beyond_warm_reach(900, 1, 1, 1, 20) == 850  # 20 x (1 x 1.5 / 1 + 1)
    assert beyond_warm_reach(900, 20, 10_000, 1, 20) == 879  # ceil(20 x 1.003)
    assert warm_slots(900, 1, 500, 1_300, 6) == 20
    assert warm_slots(900, 1, 1, 1, 6) == 20
    assert warm_slots(900, 6, 3_000, 1, 6) == 20


def test_a_small_stop_still_hands_over_five_at_once() -> None:
    """10 streams in a 12 s warm phase would need one slot; the stop runs the least, 5."""
    assert warm_at_once(10, 12_000) == 5
