"""``holdfast up`` inserts its streams with pauses between them, over ten seconds at most."""

from __future__ import annotations

from holdfast.fleet.session import INSERT_SPREAD_MAX_S, insert_groups


def test_a_few_streams_go_one_at_a_time() -> None:
    """60 streams 0.15 s apart pause 8.85 s in all: one per pause, as before."""
    assert insert_groups(60, 0.15) == [1] * 60


def test_many_streams_go_in_even_groups_within_the_bound() -> None:
    """1,000 streams: 67 groups of 14-15, 66 pauses of 0.15 s (9.9 s), not 999 pauses."""
    groups = insert_groups(1_000, 0.15)
    assert sum(groups) == 1_000 and len(groups) == 67
    assert set(groups) == {14, 15}
    assert (len(groups) - 1) * 0.15 <= INSERT_SPREAD_MAX_S


def test_no_spread_or_no_streams() -> None:
    """No pause asked: all at once; nothing to insert: no group."""
    assert insert_groups(30, 0) == [30]
    assert insert_groups(0, 0.15) == []
