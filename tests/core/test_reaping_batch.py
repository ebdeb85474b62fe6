"""The sweeper releases a dead session's streams in PartiQL batches (``reap_mode="batch"``) with
exactly the effect of ``release_owned``, each statement on its own; single mode stays for moto.

The owner index is eventually consistent: a sweep can see a stream under the dead owner after
another worker took it over. DynamoDB Local updates the index at once, so these tests replay
the index as it was before the takeover (``stale_index``) to reach that case.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from holdfast.core.batch import RenewMode
from holdfast.core.schema import ATTR, BACKSTOP_MS, pk_for
from holdfast.core.sessions import SessionItem, SessionStore
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from tests.conftest import client_for, own_tables
from tests.core.test_batch_invalid import fill_to_the_limit
from tests.core.test_store import Clock

TTL_MS = 4_000
SKEW_MS = 500
URL = "ws://127.0.0.1:9/s"


@dataclass
class Fleet:
    ddb: Any
    leases: LeaseStore
    sessions: SessionStore
    clock: Clock
    calls: list[str]  # DynamoDB operations the client made, in order


def fleet_on(aws: LocalAws, mode: RenewMode) -> Fleet:
    ddb = client_for(aws, "dynamodb")
    table, session_table = own_tables(aws)
    clock, calls = Clock(), []
    ddb.meta.events.register("before-call.dynamodb.*",
                             lambda model, **_: calls.append(model.name))
    return Fleet(ddb, LeaseStore(ddb, table, lease_ms=BACKSTOP_MS, skew_ms=SKEW_MS, clock=clock),
                 SessionStore(ddb, session_table, table, ttl_ms=TTL_MS, skew_ms=SKEW_MS,
                              clock=clock, reap_mode=mode), clock, calls)


def dead_session(f: Fleet, worker_id: str, ids: list[str]) -> SessionItem:
    """A session that acquired ``ids``, heartbeat once, then went silent and was declared DEAD."""
    session = f.sessions.start(worker_id, capacity=len(ids))
    for conn in ids:
        assert create_stream(f.ddb, f.leases.table, conn, URL)
        assert f.leases.acquire(conn, session.owner).owner == session.owner
    f.clock.now += TTL_MS + SKEW_MS + 1
    item = f.sessions.get(worker_id)
    assert item is not None and f.sessions.mark_dead(item)
    dead = f.sessions.get(worker_id)
    assert dead is not None
    return dead


def take_over(f: Fleet, conn_id: str, owner: str) -> None:
    """Another worker took the stream (it was released, then acquired)."""
    f.sessions.release_owned(conn_id, f.leases.get_raw(conn_id)[ATTR.lease_owner]["S"], "moved")
    assert f.leases.acquire(conn_id, owner).owner == owner


@contextmanager
def stale_index(f: Fleet, monkeypatch: pytest.MonkeyPatch, owner: str) -> Iterator[None]:
    """The owner index as it showed ``owner``'s streams now, for the rest of the block."""
    shown = f.sessions.owned_by(owner)
    yield
    monkeypatch.setattr(f.sessions, "owned_by", lambda o: list(shown) if o == owner else [])


def without_pk(raw: dict[str, Any] | None) -> dict[str, Any]:
    assert raw is not None
    return {k: v for k, v in raw.items() if k != ATTR.pk}


def test_a_batch_reap_writes_what_release_owned_writes_and_skips_taken_streams(
        ddb_local: LocalAws, unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """60 streams of a dead session, 7 taken over meanwhile: 53 released in 3 PartiQL batches
    with every attribute as release_owned writes them, the 7 taken ones untouched."""
    f = fleet_on(ddb_local, "batch")
    ids = [f"{unique_id}-{i}" for i in range(60)]
    # The reference: one more stream, acquired with them by another owner, released below by
    # release_owned at the reap's instant with the same reason and unowned time.
    ref = f"{unique_id}-ref"
    create_stream(f.ddb, f.leases.table, ref, URL)
    other_dead = f.leases.acquire(ref, f"{unique_id}-old#1").owner
    dead = dead_session(f, f"{unique_id}-w", ids)
    taken = ids[3:60:9]
    with stale_index(f, monkeypatch, dead.owner):
        for conn in taken:
            take_over(f, conn, f"{unique_id}-new#2")
    before = {c: f.leases.get_raw(c) for c in taken}
    f.clock.now += 1_000
    why = f"session {dead.owner} dead"
    assert f.sessions.release_owned(ref, other_dead, why, unowned_since_ms=dead.heartbeat_at_ms)
    expected = without_pk(f.leases.get_raw(ref))
    f.calls.clear()

    released, errors = f.sessions.reap(dead)

    assert sorted(released) == sorted(set(ids) - set(taken)) and errors == []
    assert f.calls.count("BatchExecuteStatement") == 3 and "UpdateItem" not in f.calls
    for conn in released:
        assert without_pk(f.leases.get_raw(conn)) == expected, conn
    assert {c: f.leases.get_raw(c) for c in taken} == before


def test_an_invalid_item_is_that_items_error_only(
        ddb_local: LocalAws, unique_id: str) -> None:
    """One stream at the 400 KB limit (a release that sets last_error cannot fit): the other 29
    are released in batches, the bad one is reported and keeps its owner, the session is not
    marked reaped, and the next reap retries it."""
    f = fleet_on(ddb_local, "batch")
    ids = [f"{unique_id}-{i}" for i in range(30)]
    dead = dead_session(f, f"{unique_id}-w", ids)
    bad = ids[11]
    fill_to_the_limit(f.ddb, f.leases.table, bad)
    f.calls.clear()

    released, errors = f.sessions.reap(dead)

    assert sorted(released) == sorted(set(ids) - {bad})
    assert [c for c, _ in errors] == [bad] and "maximum allowed size" in errors[0][1]
    assert f.calls.count("BatchExecuteStatement") == 2
    assert f.leases.get_raw(bad)[ATTR.lease_owner]["S"] == dead.owner  # type: ignore[index]
    f.clock.now += 10_000
    again = f.sessions.get(f"{unique_id}-w")
    assert again is not None and not again.reaped
    assert f.sessions.reap(again)[1] == [(bad, errors[0][1])]


def test_an_item_missing_what_the_marker_copies_is_released_alone(
        ddb_local: LocalAws, unique_id: str) -> None:
    """PartiQL has no if_not_exists: a stream without desired_state is refused in the batch and
    released by a single UpdateItem, with the marker's UNKNOWN as release_owned writes it."""
    f = fleet_on(ddb_local, "batch")
    ids = [f"{unique_id}-{i}" for i in range(5)]
    dead = dead_session(f, f"{unique_id}-w", ids)
    f.ddb.update_item(TableName=f.leases.table, Key={ATTR.pk: {"S": pk_for(ids[2])}},
                      UpdateExpression="REMOVE #ds",
                      ExpressionAttributeNames={"#ds": ATTR.desired_state})
    f.calls.clear()

    released, errors = f.sessions.reap(dead)

    assert sorted(released) == sorted(ids) and errors == []
    assert f.calls.count("BatchExecuteStatement") == 1 and f.calls.count("UpdateItem") == 1
    raw = f.leases.get_raw(ids[2])
    assert raw is not None and ATTR.lease_owner not in raw
    assert raw[ATTR.unowned_desired_state] == {"S": "UNKNOWN"}


def test_a_throttled_statement_is_that_items_error(
        ddb_local: LocalAws, unique_id: str) -> None:
    """DynamoDB throttles one statement of a batch (it is not applied): that stream is the
    reap's error and keeps its owner, the others are released, and the next reap frees it."""
    f = fleet_on(ddb_local, "batch")
    ids = [f"{unique_id}-{i}" for i in range(10)]
    dead = dead_session(f, f"{unique_id}-w", ids)
    dropped: list[Any] = []

    def drop(params: dict[str, Any], **_: Any) -> None:
        if not dropped:  # the first batch only: DynamoDB never sees statement 4
            dropped.append(params["Statements"].pop(4))

    def throttled(parsed: dict[str, Any], **_: Any) -> None:
        if len(dropped) == 1:
            parsed["Responses"].insert(4, {"Error": {"Code": "ThrottlingError",
                                                     "Message": "Throughput exceeds"}})
            dropped.append("answered")

    f.ddb.meta.events.register("before-parameter-build.dynamodb.BatchExecuteStatement", drop)
    f.ddb.meta.events.register("after-call.dynamodb.BatchExecuteStatement", throttled)
    shown = f.sessions.owned_by(dead.owner)
    throttled_id = shown[4]

    released, errors = f.sessions.reap(dead)

    assert sorted(released) == sorted(set(ids) - {throttled_id})
    assert [c for c, _ in errors] == [throttled_id] and "throttled" in errors[0][1]
    raw = f.leases.get_raw(throttled_id)
    assert raw is not None and raw[ATTR.lease_owner]["S"] == dead.owner
    assert f.sessions.reap(dead) == ([throttled_id], [])


def test_single_mode_on_moto_releases_and_skips_taken_streams(
        moto_local: LocalAws, unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On moto (whose PartiQL ignores conditions) the single mode releases a dead session's
    streams one UpdateItem each and leaves a stream taken over meanwhile to its new owner."""
    f = fleet_on(moto_local, "single")
    ids = [f"{unique_id}-{i}" for i in range(6)]
    dead = dead_session(f, f"{unique_id}-w", ids)
    with stale_index(f, monkeypatch, dead.owner):
        take_over(f, ids[1], f"{unique_id}-new#2")
    f.calls.clear()

    released, errors = f.sessions.reap(dead)

    assert sorted(released) == sorted(set(ids) - {ids[1]}) and errors == []
    assert "BatchExecuteStatement" not in f.calls and f.calls.count("UpdateItem") == 6
    raw = f.leases.get_raw(ids[1])
    assert raw is not None and raw[ATTR.lease_owner]["S"] == f"{unique_id}-new#2"
