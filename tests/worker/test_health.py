"""The loopback health endpoint and the probe command."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from holdfast.worker.health import HealthServer, LoopMonitor, main, probe


@dataclass
class Subject:
    worker_id: str = "w1"
    stopping: bool = False
    healthy_calls: int = 0

    def healthy(self) -> bool:  # what a DynamoDB-based check asked; /health must not
        self.healthy_calls += 1
        return False

    def free_capacity(self) -> int:
        return 3


async def test_health_follows_event_loop_lag_not_dynamodb() -> None:
    """200 while the loop keeps time (whatever DynamoDB does), 503 once it lags; probe follows."""
    subject = Subject()
    clock = [100.0]
    monitor = LoopMonitor(tick_s=0.05, max_lag_s=1.0, clock=lambda: clock[0])
    server = HealthServer(0, subject, monitor=monitor)
    task = asyncio.create_task(server.run())
    while server.server is None or monitor.stamped is None:  # noqa: ASYNC110 - no event
        await asyncio.sleep(0.01)
    assert server.server is not None
    port = server.server.sockets[0].getsockname()[1]
    assert await asyncio.to_thread(probe, port)
    assert subject.healthy_calls == 0
    clock[0] += 0.9  # the loop is 0.85 s late: within the bound
    monitor.stamped = 100.0
    assert await asyncio.to_thread(probe, port)

    async def forever(_: float) -> None:
        await asyncio.Event().wait()

    monitor.sleep = forever
    await asyncio.sleep(0.1)  # the monitor's last tick: it never stamps again
    clock[0] += 5.0
    assert not await asyncio.to_thread(probe, port)
    assert await asyncio.to_thread(main, ["--port", str(port)]) == 1
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_probe_of_nothing_is_unhealthy() -> None:
    """No worker listening: the probe fails."""
    assert not probe(1, timeout_s=0.5)
