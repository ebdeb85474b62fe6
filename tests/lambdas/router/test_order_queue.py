"""Stop orders on the owner's own order queue (moto SQS), before the durable session order."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core import names
from holdfast.core.bundles import unbundle
from holdfast.core.directives import parse_inbox_body
from holdfast.core.exceptions import ConfigError
from holdfast.core.orders import Order, order_queue_name
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.lambdas.router.handler import SEND_RESERVE_MS, RouterDeps, route
from holdfast.lambdas.settings import Settings
from holdfast.localaws import LocalAws
from holdfast.runner.context import LocalContext
from tests.lambdas.records import event, image, record

PREFIX = "test-orders-"


def deps_for(ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, prefix: str | None,
             session_table: str | None = None) -> RouterDeps:
    sessions = SessionStore(ddb, session_table or ddb_local.session_table, ddb_local.table,
                            ttl_ms=4_000, skew_ms=1_000)
    settings = Settings(table=ddb_local.table, queue_url=queue_url,
                        session_table=sessions.table, orders_queue_prefix=prefix)
    store = LeaseStore(ddb, ddb_local.table, lease_ms=20_000, skew_ms=1_000)
    return RouterDeps(sqs, store, settings, sleep=lambda _s: None, sessions=sessions)


def stop_record(conn_id: str, owner: str, *, seq: str | None = None) -> dict[str, Any]:
    """A held stream set STOPPED, as the stream delivers it."""
    expires = wall_clock_ms() + 3_600_000
    return record("MODIFY", image(conn_id, owner=owner, expires=expires, epoch=6),
                  image(conn_id, state="STOPPED", owner=owner, expires=expires, epoch=6),
                  seq=seq)


def messages(sqs: Any, url: str) -> list[str]:
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    return [m["Body"] for m in resp.get("Messages", [])]


@pytest.fixture
def live_owner(ddb_local: LocalAws, ddb: Any, unique_id: str) -> str:
    return SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=4_000,
                        skew_ms=1_000).start(f"w-{unique_id}", 10).owner


def session_orders(ddb_local: LocalAws, ddb: Any, owner: str) -> frozenset[str]:
    store = SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=4_000,
                         skew_ms=1_000)
    item = store.get(owner.partition("#")[0])
    assert item is not None
    return item.orders


def test_order_goes_to_the_owners_queue_and_session(ddb_local: LocalAws, ddb: Any, sqs: Any,
                                                    queue_url: str, unique_id: str,
                                                    live_owner: str) -> None:
    """With a prefix, the derived queue receives the order's body; the session gets it too."""
    order_url = sqs.create_queue(QueueName=order_queue_name(PREFIX, live_owner))["QueueUrl"]
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX)
    assert route(event(stop_record(unique_id, live_owner)), None, deps) == {
        "batchItemFailures": []}
    order = Order.stop(unique_id, 6)
    assert messages(sqs, order_url) == [order.body(live_owner)]
    assert parse_inbox_body(order.body(live_owner), live_owner) == order
    assert session_orders(ddb_local, ddb, live_owner) == {order.encode()}


def test_a_batchs_orders_for_one_owner_are_one_message_and_one_session_write(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, unique_id: str,
        live_owner: str) -> None:
    """Stops of many streams of one worker: one bundle on its queue, one write to its session."""
    order_url = sqs.create_queue(QueueName=order_queue_name(PREFIX, live_owner))["QueueUrl"]
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX)
    ids = [f"{unique_id}-{i}" for i in range(12)]
    writes: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        writes.append(params.get("TableName", ""))

    ddb.meta.events.register("before-parameter-build.dynamodb.UpdateItem", count)
    try:
        assert route(event(*(stop_record(c, live_owner) for c in ids)), None, deps) == {
            "batchItemFailures": []}
    finally:
        ddb.meta.events.unregister("before-parameter-build.dynamodb.UpdateItem", count)
    orders = [Order.stop(c, 6) for c in ids]
    bodies = messages(sqs, order_url)
    assert len(bodies) == 1
    assert sorted(parse_inbox_body(b, live_owner).encode() for b in unbundle(
        bodies[0], live_owner)) == sorted(o.encode() for o in orders)  # type: ignore[union-attr]
    assert writes.count(ddb_local.session_table) == 1
    assert session_orders(ddb_local, ddb, live_owner) == {o.encode() for o in orders}


def test_missing_order_queue_is_not_a_failure(ddb_local: LocalAws, ddb: Any, sqs: Any,
                                              queue_url: str, unique_id: str, live_owner: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """No queue with the derived name: counted and logged, the session order still given."""
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX)
    assert route(event(stop_record(unique_id, live_owner, seq="31")), None, deps) == {
        "batchItemFailures": []}
    assert [r.levelname for r in caplog.records
            if r.getMessage() == "order not queued: no order queue"] == ["INFO"]
    assert session_orders(ddb_local, ddb, live_owner) == {Order.stop(unique_id, 6).encode()}


def test_unreachable_sqs_is_not_a_failure(ddb_local: LocalAws, ddb: Any, dead_sqs: Any,
                                          unique_id: str, live_owner: str,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """Any other send error is logged and counted; the session path still delivers."""
    deps = deps_for(ddb_local, ddb, dead_sqs, "http://127.0.0.1:1/000000000000/nudges", PREFIX)
    assert route(event(stop_record(unique_id, live_owner, seq="32")), None, deps) == {
        "batchItemFailures": []}
    assert [r.levelname for r in caplog.records
            if r.getMessage() == "order not queued"] == ["ERROR"]
    assert session_orders(ddb_local, ddb, live_owner) == {Order.stop(unique_id, 6).encode()}


def test_no_prefix_sends_nothing(ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str,
                                 unique_id: str, live_owner: str) -> None:
    """Without a prefix no order queue is written, even if one exists."""
    order_url = sqs.create_queue(QueueName=order_queue_name(PREFIX, live_owner))["QueueUrl"]
    deps = deps_for(ddb_local, ddb, sqs, queue_url, None)
    assert route(event(stop_record(unique_id, live_owner)), None, deps) == {
        "batchItemFailures": []}
    assert messages(sqs, order_url) == []
    assert session_orders(ddb_local, ddb, live_owner) == {Order.stop(unique_id, 6).encode()}


def test_failed_session_order_still_fails_the_record(ddb_local: LocalAws, ddb: Any, sqs: Any,
                                                     queue_url: str, unique_id: str,
                                                     live_owner: str) -> None:
    """The queued copy is sent, but a failed add_order is reported for Lambda to retry."""
    order_url = sqs.create_queue(QueueName=order_queue_name(PREFIX, live_owner))["QueueUrl"]
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX, session_table="no-such-table")
    assert route(event(stop_record(unique_id, live_owner, seq="33")), None, deps) == {
        "batchItemFailures": [{"itemIdentifier": "33"}]}
    assert len(messages(sqs, order_url)) == 1


def test_plain_owner_has_no_order_queue(ddb_local: LocalAws, ddb: Any, sqs: Any,
                                        queue_url: str, unique_id: str) -> None:
    """A per-stream-lease owner (no '#') has no session and so no order queue: nothing sent."""
    owner = f"plain-{unique_id}"
    order_url = sqs.create_queue(QueueName=order_queue_name(PREFIX, owner))["QueueUrl"]
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX)
    assert route(event(stop_record(unique_id, owner)), None, deps) == {"batchItemFailures": []}
    assert messages(sqs, order_url) == []


def test_prefix_setting() -> None:
    """HOLDFAST_ORDERS_QUEUE_PREFIX: unset or empty is None, a bad one a ConfigError."""
    base = {names.ENV_TABLE: "t", names.ENV_QUEUE_URL: "http://q/1/n"}
    assert Settings.from_env(base).orders_queue_prefix is None
    assert Settings.from_env({**base, names.ENV_ORDERS_QUEUE_PREFIX: " "}).orders_queue_prefix \
        is None
    assert Settings.from_env({**base, names.ENV_ORDERS_QUEUE_PREFIX: "hf-orders-"}) \
        .orders_queue_prefix == "hf-orders-"
    with pytest.raises(ConfigError, match=names.ENV_ORDERS_QUEUE_PREFIX):
        Settings.from_env({**base, names.ENV_ORDERS_QUEUE_PREFIX: "bad.prefix"})
    with pytest.raises(ConfigError, match=names.ENV_ORDERS_QUEUE_PREFIX):
        Settings.from_env({**base, names.ENV_ORDERS_QUEUE_PREFIX: "x" * 41})



def test_orders_left_when_the_invocation_runs_short_are_retried_not_timed_out(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, unique_id: str,
        live_owner: str) -> None:
    """Short of time (less than the send reserve left), an order is neither queued nor written
    but failed back for Lambda to retry alone (a slow owner's writes timed the invocation
    out, and its whole batch was retried)."""
    order_url = sqs.create_queue(QueueName=order_queue_name(PREFIX, live_owner))["QueueUrl"]
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX)
    short = LocalContext("holdfast-router", timeout_ms=SEND_RESERVE_MS - 1_000)
    assert route(event(stop_record(unique_id, live_owner, seq="34")), short, deps) == {
        "batchItemFailures": [{"itemIdentifier": "34"}]}
    assert messages(sqs, order_url) == []
    assert session_orders(ddb_local, ddb, live_owner) == frozenset()
