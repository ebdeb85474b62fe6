"""The router on restarts that still name an old owner: its session decides (DynamoDB Local)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from holdfast.core.schema import ATTR, SESSION, SessionState, owner_for, pk_for, session_pk_for
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.localaws import LocalAws
from lambdas.router.handler import RouterDeps, route
from lambdas.settings import Settings
from tests.lambdas.helpers import receive_nudges
from tests.lambdas.records import event, image, record

TTL_MS, SKEW_MS = 4_000, 1_000
BACKSTOP_MS = 3_600_000


def store_at(ddb_local: LocalAws, ddb: Any, offset_ms: int = 0,
             session_table: str | None = None) -> SessionStore:
    return SessionStore(ddb, session_table or ddb_local.session_table, ddb_local.table,
                        ttl_ms=TTL_MS, skew_ms=SKEW_MS,
                        clock=lambda: wall_clock_ms() + offset_ms)


def router_deps(ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str,
                sessions: SessionStore) -> RouterDeps:
    settings = Settings(table=ddb_local.table, queue_url=queue_url,
                        session_table=sessions.table, skew_ms=SKEW_MS)
    store = LeaseStore(ddb, ddb_local.table, lease_ms=20_000, skew_ms=SKEW_MS)
    return RouterDeps(sqs, store, settings, sleep=lambda _s: None, sessions=sessions)


def get(ddb: Any, table: str, conn_id: str) -> dict[str, Any]:
    item: dict[str, Any] = ddb.get_item(TableName=table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                                        ConsistentRead=True)["Item"]
    return item


def restart(ddb: Any, ddb_local: LocalAws, conn_id: str, owner: str) -> dict[str, Any]:
    """Write a stopped item held by ``owner`` and start it again, as ``holdfast start`` does
    after a crash while stopped; returns the MODIFY record the stream delivers."""
    expires = wall_clock_ms() + BACKSTOP_MS
    stopped = image(conn_id, state="STOPPED", owner=owner, expires=expires, epoch=4,
                    status="RUNNING", last_seq=11)
    started = image(conn_id, owner=owner, expires=expires, epoch=4, status="RUNNING",
                    last_seq=11)
    ddb.put_item(TableName=ddb_local.table, Item=started)
    return record("MODIFY", stopped, started)


def _live(s: SessionStore, wid: str) -> str:
    return s.start(wid, 10).owner


def _dead(s: SessionStore, wid: str) -> str:
    session = SessionStore(s.client, s.table, s.lease_table, ttl_ms=TTL_MS, skew_ms=SKEW_MS,
                           clock=lambda: wall_clock_ms() - 60_000).start(wid, 10)
    item = s.get(wid)
    assert item is not None and s.mark_dead(item)
    return session.owner


def _ended(s: SessionStore, wid: str) -> str:
    session = s.start(wid, 10)
    assert s.end(session)
    return session.owner


def _silent(s: SessionStore, wid: str) -> str:
    return SessionStore(s.client, s.table, s.lease_table, ttl_ms=TTL_MS, skew_ms=SKEW_MS,
                        clock=lambda: wall_clock_ms() - 60_000).start(wid, 10).owner


def _replaced(s: SessionStore, wid: str) -> str:
    s.start(wid, 10)
    item = s.get(wid)
    assert item is not None
    return owner_for(wid, "0ldinc")  # the stream names an incarnation that is not the live one


def _missing(s: SessionStore, wid: str) -> str:
    return owner_for(wid, "abc123")


SESSIONS: list[tuple[str, Callable[[SessionStore, str], str], bool, str]] = [
    ("live session keeps it", _live, False, "owner_live"),
    ("silent session is left to the sweeper", _silent, False, "owner_silent"),
    ("dead session loses it", _dead, True, "owner_released"),
    ("ended session loses it", _ended, True, "owner_released"),
    ("replaced incarnation loses it", _replaced, True, "owner_released"),
    ("missing session is left to the owner audit", _missing, False, "owner_unknown"),
]


@pytest.mark.parametrize(("case", "make_owner", "released", "result"), SESSIONS,
                         ids=[c[0] for c in SESSIONS])
def test_restart_with_old_owner(case: str, make_owner: Callable[[SessionStore, str], str],
                                released: bool, result: str, ddb_local: LocalAws, ddb: Any,
                                sqs: Any, queue_url: str, unique_id: str,
                                caplog: pytest.LogCaptureFixture) -> None:
    """A restarted stream is released from a gone session (then nudged by that release's own
    record) and left with a live or silent one; nothing is nudged directly."""
    sessions = store_at(ddb_local, ddb)
    owner = make_owner(sessions, f"w-{unique_id}")
    rec = restart(ddb, ddb_local, unique_id, owner)
    deps = router_deps(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(rec), None, deps) == {"batchItemFailures": []}
    checked = [r for r in caplog.records if r.getMessage() == "owner checked"]
    assert [getattr(r, "result", None) for r in checked] == [result]
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    after = get(ddb, ddb_local.table, unique_id)
    if not released:
        assert after == rec["dynamodb"]["NewImage"]
        session = sessions.get(f"w-{unique_id}")
        if make_owner is not _missing:
            assert session is not None and session.state is SessionState.ALIVE  # never marked
        return
    assert ATTR.lease_owner not in after
    assert after[ATTR.lease_expires_at_ms] == {"N": "0"}
    assert after[ATTR.status] == {"S": "RELEASED"}
    assert after[ATTR.last_seq] == {"N": "11"}  # the checkpoint survives the release
    # The release's own record: nudged "released" by the ordinary path.
    assert route(event(record("MODIFY", rec["dynamodb"]["NewImage"], after)), None,
                 deps) == {"batchItemFailures": []}
    assert receive_nudges(sqs, queue_url, expect=1) == [
        {"conn_id": unique_id, "reason": "released", "epoch": 4}]


def test_release_is_conditional_on_the_owner(ddb_local: LocalAws, ddb: Any, sqs: Any,
                                             queue_url: str, unique_id: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """If the stream moved on after the record (a new holder), the router leaves it alone."""
    sessions = store_at(ddb_local, ddb)
    rec = restart(ddb, ddb_local, unique_id, _dead(sessions, f"w-{unique_id}"))
    now_held = image(unique_id, owner="w-new#fresh1", expires=wall_clock_ms() + BACKSTOP_MS,
                     epoch=5, status="RUNNING", last_seq=11)
    ddb.put_item(TableName=ddb_local.table, Item=now_held)
    deps = router_deps(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(rec), None, deps) == {"batchItemFailures": []}
    checked = [r for r in caplog.records if r.getMessage() == "owner checked"]
    assert [getattr(r, "result", None) for r in checked] == ["owner_release_raced"]
    assert get(ddb, ddb_local.table, unique_id) == now_held


def test_failed_owner_check_fails_the_record(ddb_local: LocalAws, ddb: Any, sqs: Any,
                                            queue_url: str, unique_id: str) -> None:
    """A session read that fails is reported, so Lambda retries the record."""
    sessions = store_at(ddb_local, ddb, session_table="no-such-table")
    rec = restart(ddb, ddb_local, unique_id, owner_for(f"w-{unique_id}", "abc123"))
    rec["dynamodb"]["SequenceNumber"] = "77"
    deps = router_deps(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(rec), None, deps) == {"batchItemFailures": [{"itemIdentifier": "77"}]}
    assert ATTR.lease_owner in get(ddb, ddb_local.table, unique_id)


def test_malformed_session_item_leaves_the_stream(ddb_local: LocalAws, ddb: Any, sqs: Any,
                                                  queue_url: str, unique_id: str) -> None:
    """A session item the router cannot read is no proof of death: the stream keeps its
    owner (the sweeper reports the item)."""
    wid = f"w-{unique_id}"
    ddb.put_item(TableName=ddb_local.session_table, Item={
        SESSION.pk: {"S": session_pk_for(wid)}, SESSION.incarnation: {"S": "abc123"},
        SESSION.state: {"S": "ZOMBIE"}, SESSION.expires_at_ms: {"N": "0"}})
    rec = restart(ddb, ddb_local, unique_id, owner_for(wid, "abc123"))
    deps = router_deps(ddb_local, ddb, sqs, queue_url, store_at(ddb_local, ddb))
    assert route(event(rec), None, deps) == {"batchItemFailures": []}
    assert get(ddb, ddb_local.table, unique_id) == rec["dynamodb"]["NewImage"]


def test_freed_in_place_orders_the_live_holder_to_release(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, unique_id: str) -> None:
    """The seed's release (expiry 0, owner kept) on a live session's stream becomes a release
    order in its session item, and nothing is nudged: the holder lets go itself (finding 1);
    a later write to the same freed item gives no second order."""
    sessions = store_at(ddb_local, ddb)
    owner = _live(sessions, f"w-{unique_id}")
    held = image(unique_id, owner=owner, expires=wall_clock_ms() + 20_000, epoch=2)
    freed = image(unique_id, owner=owner, expires=0, epoch=2, last_seq=3)
    edited = image(unique_id, owner=owner, expires=0, epoch=2, last_seq=3, ws_url="wss://o.t/")
    ddb.put_item(TableName=ddb_local.table, Item=freed)
    deps = router_deps(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(record("MODIFY", held, freed)), None, deps) == {"batchItemFailures": []}
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    session = sessions.get(f"w-{unique_id}")
    assert session is not None and session.orders == {f"release#2:{unique_id}"}
    assert route(event(record("MODIFY", freed, edited)), None, deps) == {
        "batchItemFailures": []}
    assert get(ddb, ddb_local.table, unique_id)[ATTR.lease_owner] == {"S": owner}


def test_freed_in_place_of_a_dead_session_is_released(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, unique_id: str) -> None:
    """A forced release of a stream whose session is dead frees it with the reaper's own
    release (then nudged by that release's record)."""
    sessions = store_at(ddb_local, ddb)
    owner = _dead(sessions, f"w-{unique_id}")
    held = image(unique_id, owner=owner, expires=wall_clock_ms() + 20_000, epoch=2)
    freed = image(unique_id, owner=owner, expires=0, epoch=2, last_seq=3)
    ddb.put_item(TableName=ddb_local.table, Item=freed)
    deps = router_deps(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(record("MODIFY", held, freed)), None, deps) == {"batchItemFailures": []}
    assert ATTR.lease_owner not in get(ddb, ddb_local.table, unique_id)
