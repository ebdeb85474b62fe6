"""Collecting order queues no live session reads, on moto SQS and DynamoDB Local."""

from __future__ import annotations

import uuid
from typing import Any

from holdfast.core.orders import order_queue_name, prefix_for
from holdfast.core.schema import session_table_definition
from holdfast.core.sessions import SessionStore
from holdfast.lambdas.orderqueues import QueueCollector, queues_to_delete
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper.loop import SweepDeps, memory_for, session_store_for, sweep_once


def test_only_queues_of_no_live_owner_and_of_our_prefix_are_doomed() -> None:
    """A live owner's queue and foreign queues stay; the rest of the prefix goes."""
    live = order_queue_name("p-", "w1#a")
    urls = [f"http://q/1/{live}", f"http://q/1/{order_queue_name('p-', 'w2#b')}",
            "http://q/1/other-queue"]
    assert queues_to_delete(urls, ["w1#a"], "p-") == [urls[1]]


def test_a_queue_of_a_fleet_whose_prefix_begins_with_ours_is_not_ours() -> None:
    """Feeds-orders-orders-<owner> (a fleet named "orders" beside the stack's default, from
    another app) is under our prefix Feeds-orders- but not ours: kept; our dead one goes."""
    ours, theirs = prefix_for("Feeds"), prefix_for("Feeds-orders")
    assert theirs.startswith(ours)
    urls = [f"http://q/1/{order_queue_name(theirs, 'w9#c')}",
            f"http://q/1/{order_queue_name(ours, 'w2#b')}"]
    assert queues_to_delete(urls, ["w1#a"], ours) == [urls[1]]


def test_collector_deletes_a_dead_sessions_queue_and_keeps_a_live_ones(
        ddb: Any, sqs: Any) -> None:
    """One collection deletes the queue of an ended session, keeps the live one's, then waits."""
    table = f"hf-oq-{uuid.uuid4().hex[:8]}"
    ddb.create_table(**session_table_definition(f"{table}-sessions"))
    store = SessionStore(ddb, f"{table}-sessions", table, ttl_ms=10_000, skew_ms=500)
    alive, ended = store.start("w-live", 10), store.start("w-gone", 10)
    assert store.end(ended)
    prefix = prefix_for(table)
    for owner in (alive.owner, ended.owner):
        sqs.create_queue(QueueName=order_queue_name(prefix, owner))
    collector = QueueCollector(prefix, every_ms=60_000)
    assert collector.step(sqs, store, now_ms=1_000) == 1
    left = sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
    assert [u.rsplit("/", 1)[1] for u in left] == [order_queue_name(prefix, alive.owner)]
    assert store.end(alive)
    assert collector.step(sqs, store, now_ms=30_000) == 0  # not due yet
    assert collector.step(sqs, store, now_ms=61_000) == 1
    assert not sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls")


def test_a_sweep_collects_the_queues_of_its_own_prefix(ddb: Any, sqs: Any, table: str,
                                                       queue_url: str) -> None:
    """``sweep_once`` runs the collector when the order-queue prefix is set."""
    ddb.create_table(**session_table_definition(f"{table}-sessions"))
    settings = Settings(table=table, queue_url=queue_url, session_table=f"{table}-sessions",
                        orders_queue_prefix=prefix_for(table))
    sessions = session_store_for(ddb, settings)
    assert sessions is not None
    gone = sessions.start("w-crashed", 10)
    assert sessions.end(gone)
    sqs.create_queue(QueueName=order_queue_name(prefix_for(table), gone.owner))
    deps = SweepDeps(ddb, sqs, settings, sessions=sessions)
    sweep_once(deps, memory_for(settings))
    assert deps.orders is not None and deps.orders.deleted == 1
    assert not sqs.list_queues(QueueNamePrefix=prefix_for(table)).get("QueueUrls")


class ScansRecorded:
    """The DynamoDB client, recording each Scan's arguments."""

    def __init__(self, ddb: Any) -> None:
        self._ddb, self.scans = ddb, []  # type: list[dict[str, Any]]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ddb, name)

    def scan(self, **kwargs: Any) -> Any:
        self.scans.append(kwargs)
        return self._ddb.scan(**kwargs)


def test_the_collector_reads_the_sessions_consistently(ddb: Any, sqs: Any) -> None:
    """The sessions are read with a consistent Scan: "listed before scanned" needs every
    session written before the Scan began (an eventually consistent one could miss a new
    worker's and delete its queue)."""
    table = f"hf-oq-{uuid.uuid4().hex[:8]}"
    ddb.create_table(**session_table_definition(f"{table}-sessions"))
    recorded = ScansRecorded(ddb)
    store = SessionStore(recorded, f"{table}-sessions", table, ttl_ms=10_000, skew_ms=500)
    alive = store.start("w-new", 10)
    prefix = prefix_for(table)
    sqs.create_queue(QueueName=order_queue_name(prefix, alive.owner))
    assert QueueCollector(prefix).step(sqs, store, now_ms=1_000) == 0
    assert [s.get("ConsistentRead") for s in recorded.scans] == [True]


class _Lines:
    """A SweepLog that keeps what it is told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, msg: object, *args: object, extra: Any = None) -> None:
        self.lines.append(("info", str(msg) % args))

    def error(self, msg: object, *args: object, extra: Any = None) -> None:
        self.lines.append(("error", str(msg) % args))


def test_a_worker_whose_session_item_does_not_parse_keeps_its_queue(ddb: Any, sqs: Any) -> None:
    """A session item that does not parse may be a live worker's: its queues stay; an ended
    session's queue goes, and the deletion is said through the sweeper's logger, naming it."""
    table = f"hf-oq-{uuid.uuid4().hex[:8]}"
    ddb.create_table(**session_table_definition(f"{table}-sessions"))
    store = SessionStore(ddb, f"{table}-sessions", table, ttl_ms=10_000, skew_ms=500)
    odd, ended = store.start("w-odd", 10), store.start("w-gone", 10)
    assert store.end(ended)
    ddb.update_item(TableName=f"{table}-sessions", Key={"Pk": {"S": "WORKER#w-odd"}},
                    UpdateExpression="SET #s = :x", ExpressionAttributeNames={"#s": "state"},
                    ExpressionAttributeValues={":x": {"S": "HALF-ALIVE"}})
    prefix = prefix_for(table)
    for owner in (odd.owner, ended.owner):
        sqs.create_queue(QueueName=order_queue_name(prefix, owner))
    said = _Lines()
    assert QueueCollector(prefix, log=said).step(sqs, store, now_ms=1_000) == 1
    left = sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
    assert [u.rsplit("/", 1)[1] for u in left] == [order_queue_name(prefix, odd.owner)]
    assert [level for level, line in said.lines
            if order_queue_name(prefix, ended.owner) in line] == ["info"]
