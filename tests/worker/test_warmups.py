"""A successor's warm-ups (``worker.warmups``) against DynamoDB Local and a real upstream."""

from __future__ import annotations

import asyncio

from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request

from holdfast.core.handoff import ABORT, READY, RESERVE, WARM, HandoffStep
from holdfast.core.store import LeaseStore
from tests.worker.conftest import Fleet, async_wait_until
from tests.worker.helpers import Recorder, running_worker


async def test_a_warm_up_dropped_while_it_connects_closes_its_socket(
        fleet: Fleet, unique_id: str) -> None:
    """The holder's ABORT comes while the successor's warm-up is still connecting: once the
    connect completes, its socket is closed, not left open for the process's life."""
    gate, opened, closed = asyncio.Event(), [], []

    async def slow_handshake(conn: ServerConnection, request: Request) -> None:
        await gate.wait()

    async def feed(conn: ServerConnection) -> None:
        opened.append(conn)
        await conn.wait_closed()
        closed.append(conn)

    conn_id = f"{unique_id}-warm"
    async with serve(feed, "127.0.0.1", 0, process_request=slow_handshake) as server:
        fleet.create(conn_id, f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/feed")
        store = LeaseStore(fleet.ddb, fleet.table, lease_ms=60_000, skew_ms=1_000)
        lease = store.acquire(conn_id, "holder#1")
        async with running_worker(fleet, Recorder()) as run:
            await async_wait_until(lambda: run.worker.owner, 5, "a session")
            warm_ups = run.worker.handoffs.warm_ups
            warming = asyncio.create_task(warm_ups.warm_up(
                HandoffStep(WARM, conn_id, lease.epoch, None, "holder#1")))
            await async_wait_until(lambda: conn_id in warm_ups.warming, 5, "warming up")
            warm_ups.abort(conn_id)
            gate.set()
            await warming
            await async_wait_until(lambda: len(opened) == 1, 5, "the warm-up's handshake")
            await async_wait_until(lambda: len(closed) == 1, 3, "the dropped socket closed")
            assert conn_id not in warm_ups.warming


async def test_offers_arriving_together_get_only_the_slots_there_are(
        fleet: Fleet, unique_id: str) -> None:
    """Three holders offer a stream each at once to a successor with one free slot: one READY,
    two ABORTs (each offer counted from its room check, not after its item read: all three
    were answered READY and started, above HOLDFAST_MAX_CONNECTIONS)."""
    store = LeaseStore(fleet.ddb, fleet.table, lease_ms=60_000, skew_ms=1_000)
    steps = []
    for i in range(3):
        conn_id = f"{unique_id}-offer{i}"
        fleet.create(conn_id, f"ws://127.0.0.1:9/{conn_id}")
        lease = store.acquire(conn_id, f"holder{i}#1")
        steps.append(HandoffStep(RESERVE, conn_id, lease.epoch, None, f"holder{i}#1"))
    async with running_worker(fleet, Recorder(), HOLDFAST_MAX_CONNECTIONS="1") as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        warm_ups = run.worker.handoffs.warm_ups
        sent: list[HandoffStep] = []
        warm_ups._send = lambda peer, step: sent.append(step)  # type: ignore[method-assign]
        await asyncio.gather(*(warm_ups.warm_up(step) for step in steps))
        assert sorted(step.kind for step in sent) == [ABORT, ABORT, READY]
        assert len(warm_ups.incoming()) == 1
        for conn_id in list(warm_ups.warming):
            warm_ups.abort(conn_id)
