"""One bad item never stops reaping (issue 18, finding 6), on DynamoDB Local.

A stream item padded to just under DynamoDB's 400 KB limit makes every further UpdateItem a
``ValidationException`` (the item would grow past the limit). Its error must stay that item's:
the session sweep, the owner audit and the worker's reconcile sweep release the others, report
it, and run again on their next pass.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from holdfast.core.aws import InvalidRequest
from holdfast.core.exceptions import StoreUnavailable
from holdfast.core.liveness import OwnerAudit
from holdfast.core.schema import BACKSTOP_MS, session_table_definition, table_definition
from holdfast.core.sessions import SessionStore, sweep_sessions
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from holdfast.worker.claims import Claim
from holdfast.worker.reconciler import Reconciler
from tests.conftest import client_for
from tests.core.test_store import Clock

TTL_MS = 4_000
SKEW_MS = 500
ITEM_LIMIT = 409_600  # DynamoDB's item size limit (400 KB)
LOG_NAME = "tests.reaping_errors"
PAD = "padding"


@dataclass
class Tables:
    ddb: Any
    leases: LeaseStore
    sessions: SessionStore
    clock: Clock


@pytest.fixture
def tables(ddb_local: LocalAws) -> Iterator[Tables]:
    """A private lease table and session table: the sweeps and the audit read them whole."""
    ddb = client_for(ddb_local, "dynamodb")
    name = f"reap-{uuid.uuid4().hex[:10]}"
    ddb.create_table(**table_definition(name))
    ddb.create_table(**session_table_definition(f"{name}-sessions"))
    clock = Clock()
    yield Tables(ddb, LeaseStore(ddb, name, lease_ms=BACKSTOP_MS, skew_ms=SKEW_MS, clock=clock),
                 SessionStore(ddb, f"{name}-sessions", name, ttl_ms=TTL_MS, skew_ms=SKEW_MS,
                              clock=clock), clock)
    ddb.delete_table(TableName=name)
    ddb.delete_table(TableName=f"{name}-sessions")


def _size(raw: dict[str, Any]) -> int:
    """DynamoDB's size of an item of strings and numbers (names + UTF-8 values; a number is
    about one byte per two digits plus one, counted generously here)."""
    total = 0
    for name, value in raw.items():
        total += len(name.encode())
        if "S" in value:
            total += len(value["S"].encode())
        else:
            total += len(value["N"]) // 2 + 2
    return total


def make_bad(t: Tables, conn_id: str) -> None:
    """Pad ``conn_id`` so the item sits a few bytes under the limit: any write that adds to it
    (a release sets ``last_error``) is refused with a ValidationException."""
    raw = t.leases.get_raw(conn_id)
    assert raw is not None
    pad = ITEM_LIMIT - _size(raw) - len(PAD) - 8
    while True:
        try:
            t.ddb.put_item(TableName=t.leases.table, Item={**raw, PAD: {"S": "x" * pad}})
            return
        except t.ddb.exceptions.ClientError:  # our estimate was a few bytes over: trim
            pad -= 16


def owned(t: Tables, owner: str, ids: list[str]) -> None:
    for conn in ids:
        assert create_stream(t.ddb, t.leases.table, conn, f"ws://127.0.0.1:9/s/{conn}")
        assert t.leases.acquire(conn, owner).owner == owner


def owner_of(t: Tables, conn_id: str) -> str | None:
    item = t.leases.get(conn_id)
    assert item is not None
    return item.lease_owner


def dead_session_with_a_bad_stream(t: Tables, unique_id: str) -> tuple[str, list[str]]:
    """A session owning three streams, the first one bad, silent past TTL + skew."""
    session = t.sessions.start(f"{unique_id}-w", capacity=10)
    ids = [f"{unique_id}-{i}" for i in range(3)]
    owned(t, session.owner, ids)
    make_bad(t, ids[0])
    with pytest.raises(InvalidRequest):  # the premise: this item refuses the reaper's write
        t.sessions.release_owned(ids[0], session.owner, "premise check")
    t.clock.now += TTL_MS + SKEW_MS + 1
    return session.owner, ids


def test_a_bad_item_does_not_stop_the_session_sweep(tables: Tables, unique_id: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """sweep_sessions releases a dead session's good streams, reports the bad one (count and
    log), keeps the session unreaped, and its next pass runs and retries the bad item."""
    t = tables
    owner, (bad, *good) = dead_session_with_a_bad_stream(t, unique_id)
    log = logging.getLogger(LOG_NAME)
    with caplog.at_level(logging.ERROR, logger=LOG_NAME):
        first = sweep_sessions(t.sessions, t.clock(), SKEW_MS, log)
    assert first.dead == [owner] and first.reaped == 2 and first.item_errors == 1
    assert [owner_of(t, c) for c in good] == [None, None] and owner_of(t, bad) == owner
    assert any(bad in r.getMessage() and "exceeded" in r.getMessage() for r in caplog.records)
    session = t.sessions.get(f"{unique_id}-w")
    assert session is not None and not session.reaped  # the bad stream is still to release

    t.clock.now += 5_000
    second = sweep_sessions(t.sessions, t.clock(), SKEW_MS, log)
    assert second.item_errors == 1 and second.reaped == 0
    # Once the item is fixed (the padding removed), the next pass releases it.
    t.ddb.update_item(TableName=t.leases.table, Key={"Pk": {"S": f"CONN#{bad}"}},
                      UpdateExpression="REMOVE #pad", ExpressionAttributeNames={"#pad": PAD})
    third = sweep_sessions(t.sessions, t.clock(), SKEW_MS, log)
    assert third.item_errors == 0 and third.reaped == 1 and owner_of(t, bad) is None


def test_a_bad_item_does_not_stop_the_owner_audit(tables: Tables, unique_id: str) -> None:
    """The owner audit releases an UNKNOWN owner's good streams after TTL + skew and reports
    the bad one as that item's error, pass after pass."""
    t = tables
    ghost = f"{unique_id}-ghost#abc123"  # no session item names it
    ids = [f"{unique_id}-{i}" for i in range(3)]
    owned(t, ghost, ids)
    make_bad(t, ids[0])
    audit = OwnerAudit(interval_ms=2_000, ttl_ms=TTL_MS, skew_ms=SKEW_MS)
    first = audit.run(t.sessions, set(), t.clock())
    assert not first.released and first.stranded == 3  # not yet: TTL + skew first
    t.clock.now += TTL_MS + SKEW_MS
    second = audit.run(t.sessions, set(), t.clock())
    assert sorted(c for c, _, _ in second.released) == sorted(ids[1:])
    assert [c for c, _ in second.errors] == [ids[0]] and "exceeded" in second.errors[0][1]
    assert [owner_of(t, c) for c in ids] == [ghost, None, None]
    t.clock.now += 2_000
    third = audit.run(t.sessions, set(), t.clock())
    assert [c for c, _ in third.errors] == [ids[0]] and not third.released


def test_one_owners_unread_session_does_not_stop_the_owner_audit(tables: Tables,
                                                                  unique_id: str) -> None:
    """The session read for one unknown owner fails (throttled): that owner's stream is left
    for the next pass, and the other owner's streams are released in this one (the failure
    used to end the pass for every owner)."""
    t = tables
    unread, ghost = f"{unique_id}-u#abc123", f"{unique_id}-g#abc123"
    owned(t, unread, [f"{unique_id}-u0"])
    owned(t, ghost, [f"{unique_id}-g0", f"{unique_id}-g1"])
    get = t.sessions.get

    def throttled(worker_id: str, **kw: Any) -> Any:
        if worker_id == f"{unique_id}-u":
            raise StoreUnavailable("get_session", "throttled")
        return get(worker_id, **kw)

    t.sessions.get = throttled  # type: ignore[method-assign]
    audit = OwnerAudit(interval_ms=2_000, ttl_ms=TTL_MS, skew_ms=SKEW_MS)
    audit.run(t.sessions, set(), t.clock())
    t.clock.now += TTL_MS + SKEW_MS
    out = audit.run(t.sessions, set(), t.clock())
    assert sorted(c for c, _, _ in out.released) == [f"{unique_id}-g0", f"{unique_id}-g1"]
    assert owner_of(t, f"{unique_id}-u0") == unread and out.stranded == 1


async def test_a_bad_item_does_not_stop_the_reconcile_sweep(tables: Tables,
                                                            unique_id: str) -> None:
    """The worker's reconcile sweep reaps a dead session with a bad stream without raising:
    the good streams are released, the bad one stays for the next pass; the death it declared
    is counted."""
    t = tables
    owner, (bad, *good) = dead_session_with_a_bad_stream(t, unique_id)
    claimed: list[str] = []

    async def claim(conn_id: str, source: str = "sweep") -> Claim:
        claimed.append(conn_id)
        return Claim.CONFLICT

    declared: list[int] = []
    reconciler = Reconciler(t.ddb, t.leases.table, SKEW_MS, claim, lambda: 10, 1.0, t.clock,
                            sessions=t.sessions, declared_dead=declared.append)
    await reconciler.sweep()
    assert [owner_of(t, c) for c in good] == [None, None] and owner_of(t, bad) == owner
    assert declared == [1]  # counted (DeadSessions), as the sweeper's deaths are
    t.clock.now += 5_000
    await reconciler.sweep()  # and again: the bad item is retried, nothing raised
    assert owner_of(t, bad) == owner


def test_a_refusing_table_ends_the_audits_releases_for_this_pass(tables: Tables,
                                                                 unique_id: str) -> None:
    """A release the table refuses (throttled: botocore has retried it for seconds) ends this
    pass's releases, not one retried release per stranded stream; the next pass releases them
    all, their unowned time still counted from when they were first seen."""
    t = tables
    ghost = f"{unique_id}-ghost#abc123"
    ids = [f"{unique_id}-{i}" for i in range(5)]
    owned(t, ghost, ids)
    audit = OwnerAudit(interval_ms=2_000, ttl_ms=TTL_MS, skew_ms=SKEW_MS)
    audit.run(t.sessions, set(), t.clock())
    first_seen = dict(audit.first_seen)
    release, calls = t.sessions.release_owned, []

    def refused(*args: Any, **kw: Any) -> bool:
        calls.append(args[0])
        raise StoreUnavailable("release_dead", "ProvisionedThroughputExceededException")

    t.sessions.release_owned = refused  # type: ignore[method-assign]
    t.clock.now += TTL_MS + SKEW_MS
    out = audit.run(t.sessions, set(), t.clock())
    assert len(calls) == 1 and len(out.errors) == 1 and not out.released
    assert audit.first_seen == first_seen
    t.sessions.release_owned = release  # type: ignore[method-assign]
    t.clock.now += 2_000
    again = audit.run(t.sessions, set(), t.clock())
    assert sorted(c for c, _, _ in again.released) == sorted(ids)
