"""The loopback health endpoint and the probe command."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from dataclasses import dataclass

from holdfast.worker.health import HealthServer, main, probe
from holdfast.worker.loopclock import LoopClock


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
    now = [100_000]
    loop = LoopClock(lambda: now[0], tick_ms=50)
    server = HealthServer(0, subject, loop, max_lag_s=1.0)
    task = asyncio.create_task(server.run())
    while server.server is None:  # noqa: ASYNC110 - no event
        await asyncio.sleep(0.01)
    port = server.server.sockets[0].getsockname()[1]
    assert await asyncio.to_thread(probe, port)
    assert subject.healthy_calls == 0
    now[0] += 900  # the next stamp is 0.85 s late: within the bound
    assert await asyncio.to_thread(probe, port)
    now[0] += 5_000  # never stamped again
    assert not await asyncio.to_thread(probe, port)
    assert await asyncio.to_thread(main, ["--port", str(port)]) == 1
    loop.stamp()  # the loop is back
    assert await asyncio.to_thread(probe, port)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_probe_of_nothing_is_unhealthy() -> None:
    """No worker listening: the probe fails."""
    assert not probe(1, timeout_s=0.5)


def test_the_health_probe_loads_alone_and_quietly() -> None:
    """``python -m holdfast.worker.health`` (every 30 s in the container) imports neither the
    worker nor websockets, and runpy has nothing to warn about (it warned on every probe)."""
    code = ("import runpy, sys, warnings\n"
            "warnings.simplefilter('error')\n"
            "sys.argv = ['health', '--port', '1']\n"
            "try:\n    runpy.run_module('holdfast.worker.health', run_name='__main__')\n"
            "except SystemExit as e:\n    print(e.code)\n"
            "print('supervisor' in str(sorted(sys.modules)), 'websockets' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["1", "False", "False"]
