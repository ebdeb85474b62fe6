"""The worker's own I/O never queues behind a handler that blocks the default executor."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from holdfast.worker.dial import getaddrinfo
from holdfast.worker.handler import FailureQueue, Message
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


async def test_a_host_name_resolves_while_handlers_hold_every_default_thread() -> None:
    """An upstream's host name is resolved on the worker's own threads: with the loop's
    default executor full of handler calls, the resolve does not wait for them."""
    release = threading.Event()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
    blockers = [asyncio.ensure_future(asyncio.to_thread(release.wait, 30)) for _ in range(4)]
    try:
        await asyncio.sleep(0.05)  # both default threads taken
        addresses = await asyncio.wait_for(getaddrinfo("localhost", 80), 3)
        assert addresses
    finally:
        release.set()
        await asyncio.gather(*blockers)


async def test_the_on_failure_send_does_not_wait_for_the_handlers_threads() -> None:
    """A message the handler gave up on is sent to the on-failure queue on the worker's own
    threads, not behind handler calls that hold the default executor."""
    release, sent = threading.Event(), threading.Event()

    class Sqs:
        def send_message(self, **_: object) -> dict[str, str]:
            sent.set()
            return {"MessageId": "1"}

    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    blocker = asyncio.ensure_future(asyncio.to_thread(release.wait, 30))
    try:
        await asyncio.sleep(0.05)
        queue = FailureQueue("https://sqs.example/q", client=Sqs())  # type: ignore[arg-type]
        await asyncio.wait_for(queue.send("{}"), 3)
        assert sent.is_set()
    finally:
        release.set()
        await blocker
