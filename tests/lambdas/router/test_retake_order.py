"""The router's answer to a write outside the protocol over a held stream (an app's PutItem of
the whole item), on DynamoDB Local and moto SQS: no nudge, no write of ownership (its IAM role
writes none), the stream held out of claims, and an order to the holder to take the stream
back, or to stop it."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.exceptions import AcquireFailed, LossReason
from holdfast.core.model import Lease
from holdfast.core.rules import DEFAULT_LEASE_MS
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.lambdas.router.handler import RouterDeps, route
from holdfast.lambdas.settings import Settings
from holdfast.localaws import LocalAws
from tests.lambdas.helpers import receive_nudges
from tests.lambdas.records import event, image, record

TTL_MS, SKEW_MS = 4_000, 1_000


@pytest.fixture
def sessions(ddb_local: LocalAws, ddb: Any) -> SessionStore:
    return SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=TTL_MS,
                        skew_ms=SKEW_MS)


def _router(ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str,
            sessions: SessionStore) -> RouterDeps:
    settings = Settings(table=ddb_local.table, queue_url=queue_url,
                        session_table=sessions.table, skew_ms=SKEW_MS)
    store = LeaseStore(ddb, ddb_local.table, lease_ms=20_000, skew_ms=SKEW_MS)
    return RouterDeps(sqs, store, settings, sleep=lambda _s: None, sessions=sessions)


def _item(ddb_local: LocalAws, ddb: Any, conn_id: str) -> dict[str, Any]:
    return dict(ddb.get_item(TableName=ddb_local.table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                             ConsistentRead=True)["Item"])


def _held(conn_id: str, owner: str) -> dict[str, Any]:
    return image(conn_id, owner=owner, expires=wall_clock_ms() + 20_000, epoch=5,
                 status="RUNNING", last_seq=41)


def _route_overwrite(ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str,
                     sessions: SessionStore, conn_id: str, owner: str,
                     **put: Any) -> dict[str, Any]:
    """A held item, the app's PutItem of the whole item over it, and the router on that
    write's record (answered with no failure); the item as it is after."""
    written = image(conn_id, expires=0, **put)
    ddb.put_item(TableName=ddb_local.table, Item=written)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(record("MODIFY", _held(conn_id, owner), written)), None, deps) == {
        "batchItemFailures": []}
    return _item(ddb_local, ddb, conn_id)


def test_a_put_over_a_held_stream_orders_its_holder_to_take_it_back(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """No nudge goes out (another worker's claim would make a second deliverer), the router
    writes no ownership, and the holder is ordered to take it back under its epoch."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    item = _route_overwrite(ddb_local, ddb, sqs, queue_url, sessions, unique_id, owner)
    assert ATTR.lease_owner not in item and ATTR.epoch not in item
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    session = sessions.get(f"w-{unique_id}")
    assert session is not None and session.orders == {f"retake#5:{unique_id}"}


def test_a_stream_written_over_is_held_for_its_holders_take_back(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """Until its holder takes it back, no other worker can claim the stream (the router holds
    it for a session TTL, as a crashed holder's would be), and the take-back lands."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    before = wall_clock_ms()
    item = _route_overwrite(ddb_local, ddb, sqs, queue_url, sessions, unique_id, owner)
    assert int(item[ATTR.lease_expires_at_ms]["N"]) >= before + DEFAULT_LEASE_MS
    store = LeaseStore(ddb, ddb_local.table, lease_ms=20_000, skew_ms=SKEW_MS)
    with pytest.raises(AcquireFailed) as refused:
        store.acquire(unique_id, "w-other#x")
    assert refused.value.reason is LossReason.BACKOFF
    taken = store.retake(Lease(unique_id, owner, 5, 0, "wss://feeds.example.test/x", 41))
    assert taken is not None and taken[0].owner == owner


@pytest.mark.parametrize(("put", "verb"), [
    ({"state": "STOPPED"}, "retake"),
    ({"ws_url": "wss://feeds.example.test/other"}, "stop")], ids=["stopped", "another-url"])
def test_a_stopping_put_or_one_on_another_url_is_ordered_as_such(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str, put: dict[str, Any], verb: str) -> None:
    """Written over as STOPPED: taken back (then released with its checkpoint by the
    holder); with another URL (another stream under the same id): stopped. No nudge."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    _route_overwrite(ddb_local, ddb, sqs, queue_url, sessions, unique_id, owner, **put)
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    session = sessions.get(f"w-{unique_id}")
    assert session is not None and session.orders == {f"{verb}#5:{unique_id}"}


def test_a_stream_written_over_stopped_then_started_in_one_batch_is_not_nudged(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """Two whole-item writes routed together, STOPPED then STARTED again: the second is not
    nudged (a claim would race the holder's take-back), the stream is held, and its holder
    takes it back and goes on."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    stopped, started = image(unique_id, state="STOPPED", expires=0), image(unique_id, expires=0)
    ddb.put_item(TableName=ddb_local.table, Item=started)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    store = deps.store
    assert route(event(record("MODIFY", _held(unique_id, owner), stopped),
                       record("MODIFY", stopped, started)),
                 None, deps) == {"batchItemFailures": []}
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    with pytest.raises(AcquireFailed):
        store.acquire(unique_id, "w-other#x")
    taken = store.retake(Lease(unique_id, owner, 5, 0, "wss://feeds.example.test/x", 41))
    assert taken is not None and taken[1] is False  # STARTED: it goes on


def test_a_stream_written_over_again_before_its_take_back_stays_held(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """A second whole-item write, routed in a later batch before the take-back landed, puts
    the expiry back to 0: not nudged (it was: "rearmed", a claim racing the take-back), and
    held again until the same end."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    first = _route_overwrite(ddb_local, ddb, sqs, queue_url, sessions, unique_id, owner)
    again = image(unique_id, expires=0)
    ddb.put_item(TableName=ddb_local.table, Item=again)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(record("MODIFY", first, again)), None, deps) == {"batchItemFailures": []}
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    assert _item(ddb_local, ddb, unique_id)[ATTR.lease_expires_at_ms] == first[
        ATTR.lease_expires_at_ms]


def test_a_stream_taken_back_and_released_in_the_same_batch_is_not_held(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """The holder took the stream back and released it before the router saw the write over
    it: the hold is not written over the release (claimable at once), and the release's
    nudge goes out."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    held, written = _held(unique_id, owner), image(unique_id, expires=0)
    released = image(unique_id, expires=0, epoch=5, status="RELEASED", last_seq=41)
    ddb.put_item(TableName=ddb_local.table, Item=released)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(record("MODIFY", held, written), record("MODIFY", written, held),
                       record("MODIFY", held, released)), None, deps) == {
        "batchItemFailures": []}
    assert [n["reason"] for n in receive_nudges(sqs, queue_url, expect=1)] == ["released"]
    assert _item(ddb_local, ddb, unique_id)[ATTR.lease_expires_at_ms] == {"N": "0"}


def test_a_stream_inserted_and_written_over_in_one_batch_is_held(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """An insert without expiry (normalised), its claim and a write over it, routed together:
    held (normalising it once per stream skipped the hold), and no nudge (the insert's)."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    inserted, held, written = image(unique_id), _held(unique_id, owner), image(unique_id)
    ddb.put_item(TableName=ddb_local.table, Item=written)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    before = wall_clock_ms()
    assert route(event(record("INSERT", None, inserted), record("MODIFY", inserted, held),
                       record("MODIFY", held, written)), None, deps) == {"batchItemFailures": []}
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    expires = int(_item(ddb_local, ddb, unique_id)[ATTR.lease_expires_at_ms]["N"])
    assert expires >= before + DEFAULT_LEASE_MS
