"""A stream stopped by its operator while it is being handed over or is on its way to a worker:
stopped and released by its holder, never started, never left owned by nobody serving it.

In process, on DynamoDB Local, moto and the demo upstream; the successor of a handoff is a name
whose messages nobody reads (its steps are given to the holder by hand).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from holdfast.core.handoff import READY, HandoffStep
from holdfast.core.orders import Order
from holdfast.core.schema import ATTR, STOPPED
from holdfast.core.table import set_desired_state
from holdfast.worker.balancing import SHED
from holdfast.worker.claims import Claim
from holdfast.worker.held import SHUTDOWN, SHUTDOWN_TIMEOUT
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until
from tests.worker.helpers import (
    Recorder,
    Running,
    holdings_alone,
    running_worker,
    set_attr,
    start_held,
)
from tests.worker.test_holdings import SlowAcquireAnswer

SUCCESSOR = "successor#1"


async def _offered(fleet: Fleet, upstream: UpstreamThread, run: Running, rec: Recorder,
                   conn: str) -> int:
    """``run``'s worker holds ``conn``, delivers it, and offers it to ``SUCCESSOR``; its
    epoch."""
    await start_held(fleet, upstream, run, [conn])
    await async_wait_until(lambda: len(rec.seqs(conn)) >= 2, 5, "messages")
    held = run.worker.streams[conn]
    assert run.worker.handoffs.offer(held, SUCCESSOR, SHUTDOWN)
    return held.held.lease.epoch


async def test_a_stop_order_after_ready_releases_to_nobody(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """READY named the successor, and the stop order came before the next frame: the stream is
    released naming nobody (named, the release held it for the successor: a restart waited
    out the hold)."""
    rec, conn = Recorder(), f"{unique_id}-ready-stop"
    async with running_worker(fleet, rec) as run:
        epoch = await _offered(fleet, upstream, run, rec, conn)
        assert set_desired_state(fleet.ddb, fleet.table, conn, STOPPED)
        run.worker.handoffs.on_step(HandoffStep(READY, conn, epoch, None, SUCCESSOR))
        assert run.worker.carry_out(Order.stop(conn, epoch))
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "released")
    item = fleet.item(conn)
    assert ATTR.lease_owner not in item and ATTR.successor not in item, item


async def test_a_stream_stopped_during_its_handoff_is_released_not_left_owned(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """STOPPED written after READY (no stop order reaches the holder): the transfer is refused
    (it needs STARTED), and the holder releases the stream instead of writing nothing, which
    left it owned by the holder and held by nobody."""
    rec, conn = Recorder(), f"{unique_id}-handoff-stop"
    async with running_worker(fleet, rec) as run:
        epoch = await _offered(fleet, upstream, run, rec, conn)
        assert set_desired_state(fleet.ddb, fleet.table, conn, STOPPED)
        run.worker.handoffs.on_step(HandoffStep(READY, conn, epoch, None, SUCCESSOR))
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "ended")
        assert run.worker.counts["handed_over"] == 0
    item = fleet.item(conn)
    assert ATTR.lease_owner not in item and ATTR.successor not in item, item


async def test_a_stop_order_for_a_stream_being_claimed_is_carried_out_at_its_start(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The acquire landed, the stream was stopped, and its stop order (addressed to us, its
    owner now) came before the acquire's answer: kept, and the stream is released at its
    start, never delivered (dropped, it delivered until a checkpoint found it STOPPED)."""
    conn = f"{unique_id}-claim-stop"
    fleet.create(conn, upstream.url(conn))
    set_attr(fleet, conn, ATTR.last_seq, {"N": "0"})  # no anchor write to find it STOPPED
    alone = holdings_alone(fleet, store_class=SlowAcquireAnswer)
    holdings, rec, store = alone.holdings, alone.rec, alone.store
    assert isinstance(store, SlowAcquireAnswer)
    claim = asyncio.create_task(holdings.claim(conn))
    await async_wait_until(store.landed.is_set, 5, "the acquire landed")
    assert set_desired_state(fleet.ddb, fleet.table, conn, STOPPED)
    epoch = int(fleet.item(conn)[ATTR.epoch]["N"])
    assert holdings.order_on_start(Order.stop(conn, epoch))
    assert not holdings.order_on_start(Order.stop(f"{unique_id}-elsewhere"))
    store.answer.set()
    assert await claim is Claim.CLAIMED
    await async_wait_until(lambda: not holdings.streams, 5, "released")
    await asyncio.gather(*holdings.tasks)
    assert ATTR.lease_owner not in fleet.item(conn) and not rec.calls


async def test_a_shed_withdrawn_at_ready_during_a_stop_goes_the_stops_way(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A shed was on offer when the stop began (the stop passed it by), and at its READY the
    decider no longer named that successor: the stream goes to the stop's successor at once,
    instead of delivering on until the drain deadline aborted it."""
    rec, conn = Recorder(), f"{unique_id}-withdrawn"
    async with running_worker(fleet, rec) as run:
        await start_held(fleet, upstream, run, [conn])
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 2, 5, "messages")
        handoffs, held = run.worker.handoffs, run.worker.streams[conn]
        assert handoffs.offer(held, SUCCESSOR, SHED)
        handoffs.withdraws = lambda _conn, _to: True  # type: ignore[assignment]
        handoffs.stop_successor = lambda: "stop-successor#2"
        handoffs.on_step(HandoffStep(READY, conn, held.held.lease.epoch, None, SUCCESSOR))
        assert held.held.stopping and held.handoff_to == "stop-successor#2"


@pytest.mark.parametrize("meanwhile", ["stopped", "checkpoint moved"])
async def test_a_stream_aborted_while_its_transfer_is_in_flight_is_released_if_it_fails(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str, meanwhile: str) -> None:
    """The stop's deadline aborts a stream whose transfer is on its way, and the transfer then
    fails, the stream still ours (stopped meanwhile, or its checkpoint moved past ours by
    someone else): the holder still releases it (keeping a moved checkpoint), which left it
    owned by the holder and held by nobody until its session was reaped."""
    rec, conn = Recorder(), f"{unique_id}-abort-transfer"
    gate = threading.Event()
    async with running_worker(fleet, rec) as run:
        epoch = await _offered(fleet, upstream, run, rec, conn)
        store = run.worker.handoffs.store
        real = store.transfer

        def held_back(*args: Any, **kwargs: Any) -> Any:
            gate.wait(10)  # the transfer's write, slow to answer
            return real(*args, **kwargs)

        store.transfer = held_back  # type: ignore[method-assign]
        held = run.worker.streams[conn]
        run.worker.handoffs.on_step(HandoffStep(READY, conn, epoch, None, SUCCESSOR))
        await async_wait_until(lambda: held.passed == "passing", 5, "the transfer sent")
        held.abort(SHUTDOWN_TIMEOUT)  # the stop's drain deadline
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "ended")
        if meanwhile == "stopped":
            assert set_desired_state(fleet.ddb, fleet.table, conn, STOPPED)
        else:
            set_attr(fleet, conn, ATTR.last_seq, {"N": "1000000"})
        gate.set()  # the transfer goes on, and is refused
        await async_wait_until(lambda: ATTR.lease_owner not in fleet.item(conn), 5,
                               "released by its holder")
    assert run.worker.counts["handed_over"] == 0
    if meanwhile != "stopped":
        assert fleet.item(conn)[ATTR.last_seq] == {"N": "1000000"}
