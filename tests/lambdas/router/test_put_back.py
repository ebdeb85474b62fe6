"""The router puts back a holding a write outside the protocol removed (an app's PutItem of the
whole item over a held stream), on DynamoDB Local and moto SQS: no nudge, the holder unchanged;
its holder told to stop where the stream was claimed meanwhile, or the write stopped it."""

from __future__ import annotations

from typing import Any

import pytest

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


def _deps(ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str,
          sessions: SessionStore) -> RouterDeps:
    settings = Settings(table=ddb_local.table, queue_url=queue_url,
                        session_table=sessions.table, skew_ms=SKEW_MS)
    store = LeaseStore(ddb, ddb_local.table, lease_ms=20_000, skew_ms=SKEW_MS)
    return RouterDeps(sqs, store, settings, sleep=lambda _s: None, sessions=sessions)


def _route(ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
           old: dict[str, Any], new: dict[str, Any]) -> None:
    """The router on the write's one record, which it answers with no failure."""
    deps = _deps(ddb_local, ddb, sqs, queue_url, sessions)
    assert route(event(record("MODIFY", old, new)), None, deps) == {"batchItemFailures": []}


def _item(ddb: Any, table: str, conn_id: str) -> dict[str, Any]:
    return dict(ddb.get_item(TableName=table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                             ConsistentRead=True).get("Item") or {})


def _overwrite(ddb: Any, table: str, conn_id: str, owner: str,
               **put: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A held item, then the app's PutItem of the whole item over it: (old, new) images."""
    held = image(conn_id, owner=owner, expires=wall_clock_ms() + 20_000, epoch=5,
                 status="RUNNING", last_seq=41)
    ddb.put_item(TableName=table, Item=held)
    written = image(conn_id, expires=0, **put)
    ddb.put_item(TableName=table, Item=written)
    return held, written


def test_a_put_over_a_held_stream_is_put_back_and_nudges_nobody(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """Owner, epoch and checkpoint come back as they were, the app's new URL stays, no
    nudge goes out (another worker's claim would make a second deliverer), an error line
    says what happened, and the holder gets no order."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    held, written = _overwrite(ddb, ddb_local.table, unique_id, owner, ws_url="wss://o.t/new")
    _route(ddb_local, ddb, sqs, queue_url, sessions, held, written)
    item = _item(ddb, ddb_local.table, unique_id)
    assert (item[ATTR.lease_owner], item[ATTR.epoch], item[ATTR.last_seq]) == (
        {"S": owner}, {"N": "5"}, {"N": "41"})
    assert item[ATTR.ws_url] == {"S": "wss://o.t/new"}
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    session = sessions.get(f"w-{unique_id}")
    assert session is not None and not session.orders
    assert any("put back" in r.getMessage() for r in caplog.records)


def test_a_put_over_a_stream_claimed_meanwhile_tells_its_old_holder_to_stop(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """Claimed by another worker before the router saw the write: nothing is written over
    the new holder's lease, and the old holder is ordered to stop (two deliverers until then)."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    held, written = _overwrite(ddb, ddb_local.table, unique_id, owner)
    store = LeaseStore(ddb, ddb_local.table, lease_ms=20_000, skew_ms=SKEW_MS)
    taken = store.acquire(unique_id, "w-other#b")
    _route(ddb_local, ddb, sqs, queue_url, sessions, held, written)
    assert _item(ddb, ddb_local.table, unique_id)[ATTR.lease_owner] == {"S": taken.owner}
    session = sessions.get(f"w-{unique_id}")
    assert session is not None and session.orders == {f"stop#5:{unique_id}"}


def test_a_stopping_put_over_a_held_stream_is_put_back_and_its_holder_stops_it(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, sessions: SessionStore,
        unique_id: str) -> None:
    """Written over as STOPPED: the holding is put back (the holder's release keeps its
    checkpoint) and the holder is ordered to stop, as for an UpdateItem to STOPPED."""
    owner = sessions.start(f"w-{unique_id}", 10).owner
    held, written = _overwrite(ddb, ddb_local.table, unique_id, owner, state="STOPPED")
    _route(ddb_local, ddb, sqs, queue_url, sessions, held, written)
    item = _item(ddb, ddb_local.table, unique_id)
    assert (item[ATTR.lease_owner], item[ATTR.desired_state]) == ({"S": owner},
                                                                  {"S": "STOPPED"})
    session = sessions.get(f"w-{unique_id}")
    assert session is not None and session.orders == {f"stop#5:{unique_id}"}
