"""The sweeper's memory of recent nudges (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from holdfast.core.table import Orphan
from holdfast.lambdas.sweeper.dedup import NudgeMemory, RenudgePolicy

POLICY = RenudgePolicy(first_ms=5_000, max_ms=20_000, unclaimed_grace_ms=1_000)
EXPIRED = Orphan("c1", 1_000)
RELEASED = Orphan("c2", 0)


def sweep(memory: NudgeMemory, now: int, *orphans: Orphan) -> list[str]:
    """One sweep that sends every chosen nudge successfully."""
    chosen = memory.select(orphans, now)
    memory.record_sent(chosen, now)
    memory.retain_only(orphans)
    return [o.conn_id for o in chosen]


def test_expired_lease_is_nudged_on_sight_then_held_back() -> None:
    """An expired lease is nudged at once, not again while a claim may be in flight."""
    m = NudgeMemory(POLICY)
    assert sweep(m, 10_000, EXPIRED) == ["c1"]
    assert sweep(m, 11_000, EXPIRED) == []
    assert sweep(m, 14_999, EXPIRED) == []
    assert sweep(m, 15_000, EXPIRED) == ["c1"]


def test_renudges_back_off_up_to_the_maximum() -> None:
    """A lease that stays orphaned is nudged after 5, 10, 20, 20 ... seconds."""
    m = NudgeMemory(POLICY)
    times = [t for t in range(0, 80_001, 500) if sweep(m, t, EXPIRED)]
    assert times == [0, 5_000, 15_000, 35_000, 55_000, 75_000]


def test_released_lease_waits_for_the_grace_period() -> None:
    """Expiry 0 was nudged by the router: the sweeper steps in only if it stays orphaned."""
    m = NudgeMemory(POLICY)
    assert sweep(m, 0, RELEASED) == []
    assert sweep(m, 999, RELEASED) == []
    assert sweep(m, 1_000, RELEASED) == ["c2"]


def test_claimed_and_released_again_is_a_new_orphan() -> None:
    """Once a lease leaves the orphan set it is forgotten; its next expiry is new."""
    m = NudgeMemory(POLICY)
    assert sweep(m, 0, EXPIRED) == ["c1"]
    assert sweep(m, 500) == []  # claimed: gone from the index
    assert len(m) == 0
    assert sweep(m, 1_000, Orphan("c1", 900)) == ["c1"]


def test_new_expiry_of_same_connection_is_nudged_at_once() -> None:
    """Same connection, different expiry: a different orphan, no waiting."""
    m = NudgeMemory(POLICY)
    assert sweep(m, 0, EXPIRED) == ["c1"]
    assert sweep(m, 100, Orphan("c1", 2_000)) == ["c1"]


def test_unsent_nudge_is_chosen_again() -> None:
    """A nudge SQS did not take is not remembered as sent."""
    m = NudgeMemory(POLICY)
    assert m.select([EXPIRED], 0) == [EXPIRED]
    assert m.select([EXPIRED], 100) == [EXPIRED]


def test_prune_forgets_stale_entries() -> None:
    """After partial sweeps, entries untouched for long are dropped (bounded memory)."""
    m = NudgeMemory(POLICY)
    sweep(m, 0, EXPIRED)
    m.select([RELEASED], 0)
    m.prune(10_000)
    assert len(m) == 2
    m.prune(100_000)
    assert len(m) == 0


@given(st.lists(st.tuples(st.integers(1, 3_000), st.sets(st.sampled_from(
    [Orphan("a", 5), Orphan("a", 0), Orphan("b", 7), Orphan("c", 0)]))), max_size=60))
def test_never_renudged_within_the_first_window(steps: list[tuple[int, set[Orphan]]]) -> None:
    """Whatever the sweep timing and orphan sets, no orphan is nudged twice within first_ms."""
    m = NudgeMemory(POLICY)
    now = 0
    last: dict[Orphan, int] = {}
    for gap, orphans in steps:
        now += gap
        chosen = m.select(sorted(orphans, key=str), now)
        m.record_sent(chosen, now)
        m.retain_only(orphans)
        for o in chosen:
            assert o in orphans
            if o in last:
                assert now - last[o] >= POLICY.first_ms
            last[o] = now
        for o in list(last):
            if o not in orphans:
                del last[o]  # it left the orphan set: a fresh sighting may nudge at once


def test_the_next_due_time_is_the_end_of_a_grace_or_a_window() -> None:
    """The sweep can wake exactly when a released stream's grace or a re-nudge window ends."""
    m = NudgeMemory(POLICY)
    assert m.next_due_ms(0) is None
    sweep(m, 0, RELEASED)  # first seen: due at the end of its grace
    assert m.next_due_ms(0) == 1_000
    sweep(m, 1_000, RELEASED, EXPIRED)  # both nudged now: due again after the first window
    assert m.next_due_ms(1_000) == 6_000
