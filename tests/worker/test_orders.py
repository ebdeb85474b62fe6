"""The order inbox on moto SQS: a session's own queue, long-polled for stop orders."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from holdfast.core.bundles import bundle_body
from holdfast.core.nudge import Nudge
from holdfast.core.orders import Order, is_missing_queue, order_queue_name, order_queue_url
from holdfast.core.table import set_desired_state
from holdfast.worker.orders import OrderInbox
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until
from tests.worker.helpers import Recorder, item_attr, running_worker


def taking(taken: list[Order]) -> Callable[[Order], bool]:
    """A ``stop_stream`` that appends each order to ``taken`` and says it was carried out."""
    def stop(order: Order) -> bool:
        taken.append(order)
        return True
    return stop


@asynccontextmanager
async def reading(inbox: OrderInbox) -> AsyncIterator[OrderInbox]:
    """``inbox.run()`` as a task for the block; then cancelled (it ends no other way) and the
    queue deleted."""
    task = asyncio.create_task(inbox.run())
    try:
        yield inbox
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await inbox.close()


@asynccontextmanager
async def inbox_running(sqs: Any, prefix: str, owner: str,
                        taken: list[Order]) -> AsyncIterator[OrderInbox]:
    inbox = OrderInbox(sqs, prefix, taking(taken), wait_s=1)
    assert await inbox.open(owner)
    async with reading(inbox):
        yield inbox


def queue_exists(sqs: Any, name: str) -> bool:
    try:
        sqs.get_queue_url(QueueName=name)
    except Exception as exc:  # botocore models the error class per client
        assert is_missing_queue(exc), exc
        return False
    return True


async def test_stop_for_its_owner_is_carried_out_and_the_queue_removed_at_close(
        sqs: Any, unique_id: str) -> None:
    """A stop sent to the owner's derived queue URL reaches stop_stream; close deletes it."""
    prefix, owner, taken = f"{unique_id}-o-", "w1#abc123", []
    name = order_queue_name(prefix, owner)
    async with inbox_running(sqs, prefix, owner, taken) as inbox:
        assert inbox.url is not None and inbox.url.endswith("/" + name)
        attrs = sqs.get_queue_attributes(QueueUrl=inbox.url, AttributeNames=["All"])
        assert attrs["Attributes"]["MessageRetentionPeriod"] == "60"
        nudge_url = sqs.get_queue_url(QueueName=name)["QueueUrl"].rsplit("/", 1)[0] + "/x"
        sqs.send_message(QueueUrl=order_queue_url(nudge_url, prefix, owner),
                         MessageBody=Order.stop("c1", 4).body(owner))
        await async_wait_until(lambda: taken, 5, "the order")
    assert taken == [Order.stop("c1", 4)]
    assert not queue_exists(sqs, name)


async def test_foreign_and_malformed_messages_are_dropped(sqs: Any, unique_id: str) -> None:
    """Orders for another owner and bodies that are not orders (one nested past the recursion
    limit, which stopped the inbox's loop) are deleted, never acted on."""
    prefix, owner, taken = f"{unique_id}-o-", "w2#abc123", []
    async with inbox_running(sqs, prefix, owner, taken) as inbox:
        assert inbox.url is not None
        for body in (Order.stop("c1").body("w2#other"), "not json", '{"owner": "w2#abc123"}',
                     '{"owner": "w2#abc123", "order": "explode:c1"}',
                     '{"owner": "w2#abc123", "bundle": ' + "[" * 5000):
            sqs.send_message(QueueUrl=inbox.url, MessageBody=body)
        await async_wait_until(lambda: inbox.received >= 5, 5, "five messages read")
        sqs.send_message(QueueUrl=inbox.url, MessageBody=Order.stop("c2").body(owner))
        await async_wait_until(lambda: taken, 5, "the real order")
    assert taken == [Order.stop("c2")]


async def test_a_vanished_queue_is_created_again(sqs: Any, unique_id: str) -> None:
    """If the queue is deleted under the worker, the inbox creates it again and keeps reading."""
    prefix, owner, taken = f"{unique_id}-o-", "w3#abc123", []
    async with inbox_running(sqs, prefix, owner, taken) as inbox:
        assert inbox.url is not None
        sqs.delete_queue(QueueUrl=inbox.url)
        await async_wait_until(lambda: inbox.url is None, 5, "the loss noticed")
        url = await async_wait_until(lambda: inbox.url, 10, "the queue created again")
        sqs.send_message(QueueUrl=url, MessageBody=Order.stop("c3").body(owner))
        await async_wait_until(lambda: taken, 5, "the order after re-creation")
    assert taken == [Order.stop("c3")]


async def test_a_new_incarnations_queue_is_read_at_once(sqs: Any, unique_id: str) -> None:
    """After a new session (a fenced worker's next incarnation), orders on the new queue are
    read at once, not after the old queue's long poll ends (a deletion does not end it)."""
    prefix, taken = f"{unique_id}-o-", []
    inbox = OrderInbox(sqs, prefix, taking(taken), wait_s=20)
    assert await inbox.open("w5#old000000001")
    async with reading(inbox):
        await asyncio.sleep(0.3)  # the old queue's 20 s poll is in flight
        assert await inbox.open("w5#new000000002")
        assert inbox.url is not None
        sqs.send_message(QueueUrl=inbox.url, MessageBody=Order.stop("c9").body("w5#new000000002"))
        await async_wait_until(lambda: taken, 3, "the new incarnation's order")
    assert taken == [Order.stop("c9")]


async def test_worker_stops_on_a_queued_order_long_before_its_heartbeat(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stop order in the queue closes and releases the stream well inside a heartbeat."""
    rec, conn = Recorder(), f"{unique_id}-q"
    prefix = f"{unique_id}-o-"
    fleet.create(conn, upstream.url(conn))
    slow = {"HOLDFAST_LEASE_SECONDS": "20", "HOLDFAST_HEARTBEAT_SECONDS": "5",
            "HOLDFAST_CHECKPOINT_SECONDS": "10", "HOLDFAST_SKEW_MS": "1000",
            "HOLDFAST_MARGIN_MS": "1000", "HOLDFAST_ORDERS_QUEUE_PREFIX": prefix}
    async with running_worker(fleet, rec, **slow) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 10, "messages")
        owner, epoch = run.worker.owner, run.worker.streams[conn].held.lease.epoch
        assert owner is not None and run.worker.inbox is not None
        url = order_queue_url(fleet.queue_url, prefix, owner)
        # An order about an older holding of the stream must not stop this one.
        fleet.sqs.send_message(QueueUrl=url, MessageBody=Order.stop(conn, epoch - 1).body(owner))
        await async_wait_until(lambda: run.worker.inbox and run.worker.inbox.received, 5,
                               "the stale order read")
        assert conn in run.worker.streams
        set_desired_state(fleet.ddb, fleet.table, conn, "STOPPED")
        t0 = time.monotonic()
        fleet.sqs.send_message(QueueUrl=url, MessageBody=Order.stop(conn, epoch).body(owner))
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "stream closed")
        closed_after = time.monotonic() - t0
    assert closed_after < 2.5  # half the 5 s heartbeat: the queue, not the heartbeat, did it
    item = fleet.item(conn)
    assert "lease_owner" not in item
    assert item_attr(item, "last_seq") == rec.seqs(conn)[-1]
    assert not queue_exists(fleet.sqs, order_queue_name(prefix, owner))


class SlowCalls:
    """The SQS client, the calls named in ``delays`` taking that long (a slow or busy SQS
    endpoint); ``calls`` counts them."""

    def __init__(self, sqs: Any, **delays: float) -> None:
        self._sqs, self.delays = sqs, delays
        self.calls: dict[str, int] = dict.fromkeys(delays, 0)

    def __getattr__(self, name: str) -> Any:
        if name not in self.delays:
            return getattr(self._sqs, name)

        def slow(**kwargs: Any) -> Any:
            self.calls[name] += 1
            time.sleep(self.delays[name])
            return getattr(self._sqs, name)(**kwargs)
        return slow


async def test_a_slow_delete_does_not_hold_up_the_next_message(sqs: Any, unique_id: str) -> None:
    """The next receive does not wait for the last one's delete: a handoff's next step lands
    in the same instant, and the delete's latency was in every handoff's gap."""
    prefix, owner, taken = f"{unique_id}-o-", "w4#abc123", []
    slow = SlowCalls(sqs, delete_message_batch=2.0)
    async with inbox_running(slow, prefix, owner, taken) as inbox:
        assert inbox.url is not None
        sqs.send_message(QueueUrl=inbox.url, MessageBody=Order.stop("c1").body(owner))
        await async_wait_until(lambda: taken, 5, "the first order")
        t0 = time.monotonic()
        sqs.send_message(QueueUrl=inbox.url, MessageBody=Order.stop("c2").body(owner))
        await async_wait_until(lambda: len(taken) == 2, 5, "the second order")
        assert time.monotonic() - t0 < 1.0  # well before the first delete returned


async def test_the_reader_waits_for_opens_queue_creation_instead_of_sending_its_own(
        sqs: Any, unique_id: str) -> None:
    """A reader already running while ``open`` creates the queue shares that CreateQueue."""
    prefix, owner = f"{unique_id}-o-", "w6#abc123"
    taken: list[Order] = []
    slow: Any = SlowCalls(sqs, create_queue=0.6)
    async with reading(OrderInbox(slow, prefix, taking(taken), wait_s=1)) as inbox:
        await asyncio.sleep(0.3)  # the reader waits for an owner
        assert await inbox.open(owner)
        assert inbox.url is not None
        sqs.send_message(QueueUrl=inbox.url, MessageBody=Order.stop("c1").body(owner))
        await async_wait_until(lambda: taken, 5, "the order")
    assert slow.calls["create_queue"] == 1


async def test_a_bundle_is_acted_on_message_by_message(sqs: Any, unique_id: str) -> None:
    """Three stop orders in one bundle: three orders carried out, in order."""
    prefix, owner, taken = f"{unique_id}-o-", "w5#abc123", []
    async with inbox_running(sqs, prefix, owner, taken) as inbox:
        assert inbox.url is not None
        orders = [Order.stop(f"c{i}", i) for i in range(3)]
        sqs.send_message(QueueUrl=inbox.url, MessageBody=bundle_body(
            owner, [o.body(owner) for o in orders]))
        await async_wait_until(lambda: len(taken) == 3, 5, "three orders")
    assert taken == orders


@pytest.mark.parametrize("reason", ["handoff", "reaped"])
async def test_a_nudge_on_our_queue_is_claimed_and_counted_a_handoff_only_if_it_is_one(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str, reason: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """A stream named to us (handoff) and one the sweeper sends a live worker (reaped, or
    unclaimed after a reap) are both claimed from our order queue; only the first is logged
    with source "handoff", so claims by source tell a move from a failover."""
    rec, conn, prefix = Recorder(), f"{unique_id}-{reason}", f"{unique_id}-o-"
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, rec, HOLDFAST_ORDERS_QUEUE_PREFIX=prefix) as run:
        inbox = run.worker.inbox
        assert inbox is not None
        for _ in range(3):  # a session lost on a loaded machine takes its queue with it
            await async_wait_until(lambda: inbox.url and inbox.owner, 10, "our order queue")
            assert inbox.url is not None and inbox.owner is not None
            fleet.sqs.send_message(QueueUrl=inbox.url,
                                   MessageBody=Nudge(conn, reason, to=inbox.owner).body())
            with contextlib.suppress(AssertionError):
                await async_wait_until(lambda: conn in run.worker.streams, 10, "claimed")
                break
        assert conn in run.worker.streams
    sources = [vars(r).get("source") for r in caplog.records if r.getMessage() == "claimed"]
    assert sources == ["handoff" if reason == "handoff" else "nudge"]


async def test_an_order_whose_handling_raises_costs_only_itself(sqs: Any, unique_id: str) -> None:
    """Acting on one order raises (a bug): logged, and the orders after it in the same
    receive and later are still carried out; the inbox keeps reading."""
    prefix, owner, taken = f"{unique_id}-o-", "w3#abc123", []

    def stop_stream(order: Order) -> bool:
        if order.conn_id == "bad":
            raise RuntimeError("a bug")
        taken.append(order)
        return True

    inbox = OrderInbox(sqs, prefix, stop_stream, wait_s=1)
    assert await inbox.open(owner)
    async with reading(inbox):
        assert inbox.url is not None
        sqs.send_message_batch(QueueUrl=inbox.url, Entries=[
            {"Id": str(i), "MessageBody": Order.stop(c).body(owner)}
            for i, c in enumerate(("bad", "good1"))])
        await async_wait_until(lambda: taken, 5, "the good order")
        sqs.send_message(QueueUrl=inbox.url, MessageBody=Order.stop("good2").body(owner))
        await async_wait_until(lambda: len(taken) == 2, 5, "the next order")
    assert taken == [Order.stop("good1"), Order.stop("good2")]
