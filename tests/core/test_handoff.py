"""A release that names its successor: the stream is kept for that owner alone for the hold."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core import rules
from holdfast.core.exceptions import AcquireFailed, LeaseLost, LossReason
from holdfast.core.schema import ATTR
from holdfast.core.store import LeaseStore
from tests.core.test_store import SKEW_MS, Clock, put_raw


def test_a_handoff_keeps_the_stream_for_its_successor_alone(
        store: LeaseStore, clock: Clock, unique_id: str, ddb: Any) -> None:
    """Within the hold another worker's acquire fails as BACKOFF; the successor's succeeds at
    once, from the release's checkpoint, and the successor mark is gone with it."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "old#1")
    assert store.release(lease, 7, successor="new#1") is None
    item = store.get(unique_id)
    assert item is not None and item.successor == "new#1"
    assert item.lease_expires_at_ms == clock.now + rules.HANDOFF_HOLD_MS
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "other#1")
    assert info.value.reason is LossReason.BACKOFF
    taken = store.acquire(unique_id, "new#1")
    assert (taken.owner, taken.last_seq) == ("new#1", 7) and taken.epoch > lease.epoch
    raw = store.get_raw(unique_id)
    assert raw is not None and ATTR.successor not in raw


def test_after_the_hold_anyone_may_take_a_handed_off_stream(
        store: LeaseStore, clock: Clock, unique_id: str, ddb: Any) -> None:
    """A successor that never claims costs the stream the hold plus the skew, no more."""
    put_raw(ddb, store.table, unique_id)
    store.release(store.acquire(unique_id, "old#1"), 3, successor="gone#1")
    clock.now += rules.HANDOFF_HOLD_MS + SKEW_MS
    assert store.acquire(unique_id, "other#1").owner == "other#1"


def test_a_give_up_never_names_a_successor(store: LeaseStore, clock: Clock, unique_id: str,
                                           ddb: Any) -> None:
    """A release after upstream errors keeps its back-off: no successor gets round it."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "old#1")
    store.release(lease, None, error="refused", retry_at_ms=clock.now + 60_000,
                  successor="new#1")
    item = store.get(unique_id)
    assert item is not None and item.successor is None
    with pytest.raises(AcquireFailed):
        store.acquire(unique_id, "new#1")


def test_a_quarantine_clears_the_successor(store: LeaseStore, clock: Clock, unique_id: str,
                                           ddb: Any) -> None:
    """A parked (malformed) item cannot be taken by the successor a handoff named."""
    put_raw(ddb, store.table, unique_id)
    store.release(store.acquire(unique_id, "old#1"), 3, successor="new#1")
    store.quarantine(unique_id, "old#1", "test")
    item = store.get(unique_id)
    assert item is not None and item.successor is None and item.status == "INVALID"
    with pytest.raises(AcquireFailed):
        store.acquire(unique_id, "new#1")


def test_claim_blocker_lets_the_named_successor_through(
        store: LeaseStore, clock: Clock, unique_id: str, ddb: Any) -> None:
    """The pure rule agrees with the condition: held for the successor, blocked for others."""
    put_raw(ddb, store.table, unique_id)
    store.release(store.acquire(unique_id, "old#1"), None, successor="new#1")
    item = store.get(unique_id)
    assert item is not None
    assert rules.claim_blocker(item, clock.now, SKEW_MS, "new#1") is None
    assert rules.claim_blocker(item, clock.now, SKEW_MS, "other#1") is LossReason.BACKOFF


def test_a_transfer_passes_the_lease_in_one_write(store: LeaseStore, clock: Clock,
                                                  unique_id: str, ddb: Any) -> None:
    """Make-before-break: owner, a higher epoch and the final checkpoint move together; the
    old holder's next write fails as LOST, the successor's lease works."""
    put_raw(ddb, store.table, unique_id)
    old = store.acquire(unique_id, "old#1")
    new = store.transfer(old, 12, "new#1")
    assert (new.owner, new.last_seq) == ("new#1", 12) and new.epoch > old.epoch
    item = store.get(unique_id)
    assert item is not None and (item.lease_owner, item.epoch, item.last_seq) == (
        "new#1", new.epoch, 12)
    with pytest.raises(LeaseLost) as info:
        store.renew(old, 13)
    assert info.value.reason is LossReason.LOST
    assert store.renew(new, 20).last_seq == 20


def test_a_stale_holder_cannot_transfer(store: LeaseStore, clock: Clock, unique_id: str,
                                        ddb: Any) -> None:
    """A holder that lost the stream (released, re-acquired by another) transfers nothing."""
    put_raw(ddb, store.table, unique_id)
    old = store.acquire(unique_id, "old#1")
    store.release(old, 5)
    other = store.acquire(unique_id, "other#1")
    with pytest.raises(LeaseLost):
        store.transfer(old, 9, "new#1")
    item = store.get(unique_id)
    assert item is not None and (item.lease_owner, item.epoch, item.last_seq) == (
        "other#1", other.epoch, 5)


def test_a_transfer_replayed_after_it_landed_returns_the_passed_lease(
        store: LeaseStore, clock: Clock, unique_id: str, ddb: Any) -> None:
    """botocore retries a transfer whose answer timed out though it landed: the retry's failed
    condition finds the item passed at that epoch, so it is done, not LOST (which would tell
    the successor ABORT and leave the stream named to it but held by nobody)."""
    put_raw(ddb, store.table, unique_id)
    old = store.acquire(unique_id, "old#1")
    first = store.transfer(old, 12, "new#1")  # landed; the holder never heard
    again = store.transfer(old, 12, "new#1")  # the retry, same clock: the same write
    assert (again.owner, again.epoch, again.last_seq) == ("new#1", first.epoch, 12)
    with pytest.raises(LeaseLost):
        store.transfer(old, 12, "other#1")  # not our write: still not ours

