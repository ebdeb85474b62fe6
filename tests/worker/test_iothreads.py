"""The worker's own I/O never queues behind a handler that blocks the default executor."""

from __future__ import annotations

import asyncio
import threading

from holdfast.worker.handler import Message
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until
from tests.worker.helpers import running_worker


async def test_claims_do_not_wait_for_a_handler_blocking_its_threads(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """With every default-executor thread held by handler calls, new streams are still
    claimed and delivered (their claims run on the worker's own threads)."""
    release = threading.Event()
    blockers = [f"{unique_id}-block{i}" for i in range(3)]
    others = [f"{unique_id}-free{i}" for i in range(4)]
    delivered: set[str] = set()

    async def handler(message: Message) -> None:
        delivered.add(message.conn_id)
        if message.conn_id in blockers:
            # The docs' advice for blocking work; 3 streams x many calls fill the pool.
            await asyncio.gather(*(asyncio.to_thread(release.wait, 60) for _ in range(16)))

    for conn in blockers + others:
        fleet.create(conn, upstream.url(conn))
    try:
        async with running_worker(fleet, handler) as run:
            for conn in blockers:
                fleet.nudge(conn)
            await async_wait_until(lambda: set(blockers) <= delivered, 15, "blockers called")
            for conn in others:
                fleet.nudge(conn)
            await async_wait_until(lambda: set(others) <= set(run.worker.streams), 10,
                                   "the other streams claimed while the handler blocks")
            await async_wait_until(lambda: set(others) <= delivered, 10, "others delivered")
            release.set()
    finally:
        release.set()
