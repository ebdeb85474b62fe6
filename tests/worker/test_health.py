"""The loopback health endpoint and the probe command."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from worker.health import HealthServer, main, probe


@dataclass
class Subject:
    ok: bool = True
    worker_id: str = "w1"
    stopping: bool = False

    def healthy(self) -> bool:
        return self.ok

    def free_capacity(self) -> int:
        return 3


async def test_health_turns_unhealthy_and_back() -> None:
    """200 while the subject is healthy, 503 when not; the probe command follows."""
    subject = Subject()
    server = HealthServer(0, subject)
    task = asyncio.create_task(server.run())
    while server.server is None:  # noqa: ASYNC110 - the server has no "started" event
        await asyncio.sleep(0.01)
    port = server.bound_port
    assert await asyncio.to_thread(probe, port)
    subject.ok = False
    assert not await asyncio.to_thread(probe, port)
    assert await asyncio.to_thread(main, ["--port", str(port)]) == 1
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_probe_of_nothing_is_unhealthy() -> None:
    """No worker listening: the probe fails."""
    assert not probe(1, timeout_s=0.5)
