"""Unowned time: the marker's pure arithmetic, and every writer's marker on DynamoDB Local/moto."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from holdfast.core.schema import ATTR, BACKSTOP_MS, STARTED, STOPPED
from holdfast.core.sessions import SessionStore, sweep_sessions
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream, set_desired_state
from holdfast.core.unowned import creation_marker, unowned_time_ms
from holdfast.localaws import LocalAws
from tests.conftest import client_for
from tests.core.test_store import Clock

LEASE_MS = 10_000
SKEW_MS = 1_000
LOG = logging.getLogger("tests.unowned")


def item(epoch: int | None = 2, since: int | None = 1_000, unowned_epoch: int | None = 2,
         desired: str | None = STARTED) -> dict[str, Any]:
    """A raw item as it was just before an acquire, with whichever marker attributes are
    given."""
    raw: dict[str, Any] = {}
    for name, value in ((ATTR.epoch, epoch), (ATTR.unowned_since_ms, since),
                        (ATTR.unowned_epoch, unowned_epoch)):
        if value is not None:
            raw[name] = {"N": str(value)}
    if desired is not None:
        raw[ATTR.unowned_desired_state] = {"S": desired}
    return raw


# -- the pure function ----------------------------------------------------------------------
def test_marker_of_the_previous_epoch_is_measured() -> None:
    """Claimed from epoch N with a marker written at epoch N: claim time minus since."""
    assert unowned_time_ms(item(), 1_750, SKEW_MS) == 750


def test_marker_of_an_older_handover_is_not_measured() -> None:
    """A marker from an earlier epoch (the last owner died in lease mode) reports nothing."""
    assert unowned_time_ms(item(epoch=5, unowned_epoch=3), 1_750, SKEW_MS) is None


@pytest.mark.parametrize("raw", [
    item(since=None), item(unowned_epoch=None), item(desired=None), item(epoch=None), {},
    {**item(), ATTR.unowned_since_ms: {"S": "soon"}},
    {**item(), ATTR.unowned_since_ms: {"N": "1.5"}},
    {**item(), ATTR.unowned_epoch: "2"},
])
def test_missing_or_mistyped_marker_is_not_measured(raw: dict[str, Any]) -> None:
    """Any missing or mistyped part of the marker reports nothing and raises nothing."""
    assert unowned_time_ms(raw, 1_750, SKEW_MS) is None


def test_a_stream_released_while_stopped_is_not_measured() -> None:
    """Released while STOPPED: its pause before a later start is not a handover."""
    assert unowned_time_ms(item(desired=STOPPED), 1_750, SKEW_MS) is None


def test_clock_skew_within_the_allowance_clamps_to_zero() -> None:
    """A marker from a clock up to the skew allowance ahead counts as an instant handover."""
    assert unowned_time_ms(item(since=2_000), 1_500, SKEW_MS) == 0
    assert unowned_time_ms(item(since=2_000), 1_000, SKEW_MS) == 0


def test_a_marker_far_in_the_future_is_dropped() -> None:
    """A marker further ahead than the skew allowance says nothing: dropped, not clamped."""
    assert unowned_time_ms(item(since=2_001), 1_000, SKEW_MS) is None


def test_creation_marker_is_measured_by_the_first_claim() -> None:
    """A created stream's marker (epoch 0, no epoch stored yet) is measured by the first
    acquire."""
    raw = dict(creation_marker(1_000))
    assert unowned_time_ms(raw, 1_300, SKEW_MS) == 300


# -- the writers, on both backends ----------------------------------------------------------
def test_release_then_acquire_measures_the_gap(store: LeaseStore, clock: Clock,
                                               unique_id: str) -> None:
    """A worker's release at T and the next claim at T + 420 ms: 420 ms unowned."""
    assert create_stream(store.client, store.table, unique_id, "ws://127.0.0.1:9/s")
    first = store.acquire(unique_id, "w1")
    assert first.unowned_ms is None  # created without a marker (a hand-inserted item)
    clock.now += 5_000
    assert store.release(first) is None
    clock.now += 420
    assert store.acquire(unique_id, "w2").unowned_ms == 420


def test_created_stream_first_claim_is_measured(store: LeaseStore, clock: Clock,
                                                unique_id: str) -> None:
    """``holdfast start``'s marker: the first claim reports the time since creation."""
    assert create_stream(store.client, store.table, unique_id, "ws://127.0.0.1:9/s",
                         created_at_ms=clock.now)
    clock.now += 250
    assert store.acquire(unique_id, "w1").unowned_ms == 250


def test_give_up_and_expiry_leave_nothing_to_measure(store: LeaseStore, clock: Clock,
                                                     unique_id: str) -> None:
    """A back-off release reports no unowned time."""
    assert create_stream(store.client, store.table, unique_id, "ws://127.0.0.1:9/s",
                         created_at_ms=clock.now)
    lease = store.acquire(unique_id, "w1")
    assert store.release(lease, error="upstream down", retry_at_ms=clock.now + 2_000) is None
    clock.now += 2_000 + SKEW_MS
    lease = store.acquire(unique_id, "w2")
    assert lease.unowned_ms is None


def test_released_while_stopped_then_started_is_not_measured(
        store: LeaseStore, clock: Clock, unique_id: str) -> None:
    """Stopped, released, started an hour later: the pause is not reported as unowned time."""
    assert create_stream(store.client, store.table, unique_id, "ws://127.0.0.1:9/s")
    lease = store.acquire(unique_id, "w1")
    assert set_desired_state(store.client, store.table, unique_id, STOPPED)
    store.release(lease)
    clock.now += 3_600_000
    assert set_desired_state(store.client, store.table, unique_id, STARTED)
    assert store.acquire(unique_id, "w2").unowned_ms is None


def test_reaped_stream_is_unowned_since_the_dead_sessions_last_heartbeat(
        ddb_local: LocalAws, clock: Clock, unique_id: str) -> None:
    """The sweeper releases a dead session's stream marked at its last heartbeat, not at the
    release: the next claim reports the whole time it went unserved."""
    ddb = client_for(ddb_local, "dynamodb")
    sessions = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=LEASE_MS,
                            skew_ms=SKEW_MS, clock=clock)
    leases = LeaseStore(ddb, ddb_local.table, lease_ms=BACKSTOP_MS, skew_ms=SKEW_MS,
                        clock=clock)
    s = sessions.start(unique_id, capacity=1)
    assert create_stream(ddb, ddb_local.table, unique_id, "ws://127.0.0.1:9/s")
    leases.acquire(unique_id, s.owner)
    clock.now += 1_000
    sessions.heartbeat_full(s, held=1, capacity=1)
    last_heartbeat = clock.now
    clock.now += LEASE_MS + SKEW_MS + 500  # silent past TTL + skew; the sweep finds it
    sweep_sessions(sessions, clock.now, SKEW_MS, LOG)
    released = leases.get(unique_id)
    assert released is not None and released.lease_owner is None
    clock.now += 300
    assert leases.acquire(unique_id, "w2#new").unowned_ms == clock.now - last_heartbeat


def test_release_owned_defaults_to_now(ddb_local: LocalAws, clock: Clock,
                                       unique_id: str) -> None:
    """Without a start time (a platform report, say) the release itself starts the clock."""
    ddb = client_for(ddb_local, "dynamodb")
    sessions = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=LEASE_MS,
                            skew_ms=SKEW_MS, clock=clock)
    leases = LeaseStore(ddb, ddb_local.table, lease_ms=LEASE_MS, skew_ms=SKEW_MS, clock=clock)
    assert create_stream(ddb, ddb_local.table, unique_id, "ws://127.0.0.1:9/s")
    leases.acquire(unique_id, "dead#one")
    clock.now += 2_000
    assert sessions.release_owned(unique_id, "dead#one", "test")
    clock.now += 150
    assert leases.acquire(unique_id, "w2").unowned_ms == 150
