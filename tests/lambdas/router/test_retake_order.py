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
    written = image(conn_id, **{"expires": 0, **put})
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


def _journal(deps: RouterDeps, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The router's holds and nudge sends, in the order it makes them."""
    calls: list[str] = []
    normalise, send = deps.store.normalise, deps.sqs.send_message_batch

    def holding(conn_id: str, at_least_ms: int = 0) -> bool:
        calls.extend(["hold"] if at_least_ms else [])
        return normalise(conn_id, at_least_ms)

    def sending(**kwargs: Any) -> Any:
        calls.append("nudge")
        return send(**kwargs)

    monkeypatch.setattr(deps.store, "normalise", holding)
    monkeypatch.setattr(deps.sqs, "send_message_batch", sending)
    return calls


def test_a_stream_written_over_stopped_then_started_in_one_batch_is_held_before_its_nudge(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two whole-item writes routed together, STOPPED then STARTED again: the stream is held
    before the second's nudge goes out (its claim would race the holder's take-back: it
    went out first), so that claim is refused, and the holder takes it back and goes on."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    stopped, started = image(unique_id, state="STOPPED", expires=0), image(unique_id, expires=0)
    ddb.put_item(TableName=ddb_local.table, Item=started)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    store, calls = deps.store, _journal(deps, monkeypatch)
    assert route(event(record("MODIFY", _held(unique_id, owner), stopped),
                       record("MODIFY", stopped, started)),
                 None, deps) == {"batchItemFailures": []}
    assert calls == ["hold", "nudge"]
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
        unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An insert without expiry (normalised), its claim and a write over it, routed together:
    held (normalising it once per stream skipped the hold) before the insert's nudge."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    inserted, held, written = image(unique_id), _held(unique_id, owner), image(unique_id)
    ddb.put_item(TableName=ddb_local.table, Item=written)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    calls, before = _journal(deps, monkeypatch), wall_clock_ms()
    assert route(event(record("INSERT", None, inserted), record("MODIFY", inserted, held),
                       record("MODIFY", held, written)), None, deps) == {"batchItemFailures": []}
    assert calls == ["hold", "nudge"]
    expires = int(_item(ddb_local, ddb, unique_id)[ATTR.lease_expires_at_ms]["N"])
    assert expires >= before + DEFAULT_LEASE_MS


def test_a_release_claim_and_write_over_in_one_batch_hold_before_the_release_nudge(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A release, another worker's claim and an app's write over that holding, routed
    together: the release's nudge goes out only once the stream is held (first, its claim
    could beat the hold: a second deliverer starting without the checkpoint)."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    before = image(unique_id, owner="w-old#1", expires=wall_clock_ms() + 20_000, epoch=4,
                   status="RUNNING", last_seq=40)
    released = image(unique_id, expires=0, epoch=4, status="RELEASED", last_seq=40)
    held, written = _held(unique_id, owner), image(unique_id, expires=0)
    ddb.put_item(TableName=ddb_local.table, Item=written)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    calls = _journal(deps, monkeypatch)
    assert route(event(record("MODIFY", before, released), record("MODIFY", released, held),
                       record("MODIFY", held, written)), None, deps) == {"batchItemFailures": []}
    assert calls == ["hold", "nudge"]
    with pytest.raises(AcquireFailed):
        deps.store.acquire(unique_id, "w-other#x")


def test_a_write_after_the_holder_gave_a_stream_back_is_not_held(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """Written over as STOPPED, taken back and released by its holder, then written whole
    again as STARTED, all routed together: nobody is left to take it back, so it is not
    held (it was, for a session TTL) and its nudge goes out."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    held, stopped = _held(unique_id, owner), image(unique_id, state="STOPPED", expires=0)
    taken = image(unique_id, state="STOPPED", owner=owner, expires=wall_clock_ms() + 20_000,
                  epoch=5, status="RUNNING", last_seq=41)
    released = image(unique_id, state="STOPPED", expires=0, epoch=5, status="RELEASED",
                     last_seq=41)
    again = image(unique_id)
    ddb.put_item(TableName=ddb_local.table, Item=again)
    deps = _router(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(record("MODIFY", held, stopped), record("MODIFY", stopped, taken),
                       record("MODIFY", taken, released), record("MODIFY", released, again)),
                 None, deps) == {"batchItemFailures": []}
    assert _item(ddb_local, ddb, unique_id)[ATTR.lease_expires_at_ms] == {"N": "0"}
    assert [n["reason"] for n in receive_nudges(sqs, queue_url, expect=1)] == ["started"]


def test_a_write_over_that_kept_a_status_is_still_normalised(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """The app's whole item copied a ``status`` and no expiry: the hold is refused (it cannot
    tell that write from a protocol one), and the item is still normalised, so the sweeper's
    index sees it should its holder be gone (it was left unindexed)."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    item = _route_overwrite(ddb_local, ddb, sqs, queue_url, sessions, unique_id, owner,
                            status="RUNNING", expires=None)
    assert item[ATTR.lease_expires_at_ms] == {"N": "0"}
