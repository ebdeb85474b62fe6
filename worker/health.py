"""Health for ECS: a tiny loopback HTTP endpoint and a probe command for the task definition.

``GET /health`` reports the *process's* liveness: 200 while the event loop keeps time (a task
stamps its clock, ``worker.loopclock``; the lag is how late the next stamp is), 503 once it lags
more than ``max_lag_s``, and no answer at all when the loop is stuck. It deliberately says
nothing about DynamoDB: when DynamoDB is slow or throttled in a whole region every task would
fail together and ECS would replace the fleet at once, which helps nobody; a worker that cannot
renew fences its own streams and starts a new session by itself. The container's health check
runs ``python -m holdfast.worker.health`` (no curl needed in the image).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from holdfast.core import settings as S
from holdfast.worker.logs import WORKER_LOGGER

if TYPE_CHECKING:
    from holdfast.worker.loopclock import LoopClock
    from holdfast.worker.supervisor import Supervisor

__all__ = ["HealthServer", "main", "probe"]

logger = Logger(service=WORKER_LOGGER, child=True)


class HealthServer:
    """Serve ``/health`` on 127.0.0.1:``port`` until cancelled; a busy port is logged, not fatal."""

    def __init__(self, port: int, subject: Supervisor, clock: LoopClock, *,
                 host: str = "127.0.0.1", max_lag_s: float = 5.0) -> None:
        self.port, self.host, self.subject = port, host, subject
        self.clock, self.max_lag_ms = clock, round(max_lag_s * 1000)
        self.server: asyncio.Server | None = None

    async def run(self) -> None:
        try:
            self.server = await asyncio.start_server(self._serve, self.host, self.port)
        except OSError as exc:
            logger.error("health endpoint cannot listen", port=self.port, error=str(exc))
            return
        try:
            async with self.server:
                await self.server.serve_forever()
        finally:
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 2.0)
            path = line.split(b" ")[1] if line.count(b" ") >= 2 else b""
            body: dict[str, object]
            if path not in (b"/health", b"/"):
                status, body = "404 Not Found", {"error": "try /health"}
            else:
                lag_ms = self.clock.lag_ms()
                ok = lag_ms <= self.max_lag_ms
                status = "200 OK" if ok else "503 Service Unavailable"
                body = {"status": "ok" if ok else "event loop lagging",
                        "loop_lag_ms": lag_ms,
                        "worker_id": self.subject.worker_id, "stopping": self.subject.stopping,
                        "free_capacity": self.subject.free_capacity()}
            data = json.dumps(body).encode()
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                         + data)
            await writer.drain()
        except (OSError, TimeoutError, IndexError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def probe(port: int, timeout_s: float = 2.0) -> bool:
    """True if the worker on this host answers healthy."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout_s):
            return True
    except (urllib.error.URLError, OSError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m holdfast.worker.health", description=__doc__)
    parser.add_argument("--port", type=int, default=S.HEALTH_PORT.read(os.environ))
    args = parser.parse_args(argv)
    return 0 if probe(args.port) else 1


if __name__ == "__main__":
    sys.exit(main())
