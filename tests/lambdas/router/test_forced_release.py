"""The router's orders to a holder's session item: on a forced release (expiry 0, owner kept)
an order, never a nudge; a session item that refuses them (DynamoDB Local and moto SQS)."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.schema import ATTR, SESSION, pk_for, session_pk_for
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.lambdas.router.handler import RouterDeps, route
from holdfast.lambdas.settings import Settings
from holdfast.localaws import LocalAws
from tests.lambdas.helpers import receive_nudges
from tests.lambdas.records import event, image, record

TTL_MS, SKEW_MS = 4_000, 1_000


def test_freed_in_place_orders_the_live_holder_to_release(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, unique_id: str) -> None:
    """The seed's release (expiry 0, owner kept) on a live session's stream becomes a release
    order in its session item, and nothing is nudged: the holder lets go itself (finding 1);
    a later write to the same freed item gives no second order, and the owner stays."""
    sessions = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=TTL_MS,
                            skew_ms=SKEW_MS)
    owner = sessions.start(f"w-{unique_id}", 10).owner
    held = image(unique_id, owner=owner, expires=wall_clock_ms() + 20_000, epoch=2)
    freed = image(unique_id, owner=owner, expires=0, epoch=2, last_seq=3)
    edited = image(unique_id, owner=owner, expires=0, epoch=2, last_seq=3, ws_url="wss://o.t/")
    ddb.put_item(TableName=ddb_local.table, Item=freed)
    settings = Settings(table=ddb_local.table, queue_url=queue_url,
                        session_table=sessions.table, skew_ms=SKEW_MS)
    store = LeaseStore(ddb, ddb_local.table, lease_ms=20_000, skew_ms=SKEW_MS)
    deps = RouterDeps(sqs, store, settings, sleep=lambda _s: None, sessions=sessions)
    assert route(event(record("MODIFY", held, freed)), None, deps) == {"batchItemFailures": []}
    assert not receive_nudges(sqs, queue_url, expect=1, timeout_s=0.5)
    session = sessions.get(f"w-{unique_id}")
    assert session is not None and session.orders == {f"release#2:{unique_id}"}
    assert route(event(record("MODIFY", freed, edited)), None, deps) == {
        "batchItemFailures": []}
    item = ddb.get_item(TableName=ddb_local.table, Key={ATTR.pk: {"S": pk_for(unique_id)}},
                        ConsistentRead=True)["Item"]
    assert item[ATTR.lease_owner] == {"S": owner}


def test_an_order_for_a_mistyped_session_item_is_refused_not_retried(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, unique_id: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """A stop for a live session whose orders attribute is not a string set (edited by hand,
    another writer): logged and counted as the item's fault, and the record is not failed. A
    retry could never succeed: it held the shard, the batch's other nudges sent every time."""
    sessions = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=TTL_MS,
                            skew_ms=SKEW_MS)
    owner = sessions.start(f"w-{unique_id}", 10).owner
    ddb.update_item(TableName=sessions.table,
                    Key={SESSION.pk: {"S": session_pk_for(f"w-{unique_id}")}},
                    UpdateExpression="SET #o = :s", ExpressionAttributeNames={"#o": SESSION.orders},
                    ExpressionAttributeValues={":s": {"S": "not a set"}})
    settings = Settings(table=ddb_local.table, queue_url=queue_url,
                        session_table=sessions.table, skew_ms=SKEW_MS)
    store = LeaseStore(ddb, ddb_local.table, lease_ms=20_000, skew_ms=SKEW_MS)
    deps = RouterDeps(sqs, store, settings, sleep=lambda _s: None, sessions=sessions)
    held = image(unique_id, owner=owner, expires=wall_clock_ms() + 20_000, epoch=2)
    stopped = image(unique_id, state="STOPPED", owner=owner, expires=wall_clock_ms() + 20_000,
                    epoch=2)
    assert route(event(record("MODIFY", held, stopped)), None, deps) == {"batchItemFailures": []}
    assert "order not given: the owner's session item is refused" in caplog.text
