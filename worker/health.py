"""Health for ECS: a tiny loopback HTTP endpoint and a probe command for the task definition.

``GET /health`` answers 200 while DynamoDB has answered within the last lease period, else 503
(a worker that cannot renew is fencing its streams and should be replaced). The container's
health check runs ``python -m worker.health`` (no curl needed in the image).
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
from typing import Protocol

from aws_lambda_powertools import Logger

__all__ = ["HealthServer", "main", "probe"]

logger = Logger(service="holdfast-worker", child=True)


class _Subject(Protocol):
    worker_id: str
    stopping: bool

    def healthy(self) -> bool: ...

    def free_capacity(self) -> int: ...


class HealthServer:
    """Serve ``/health`` on 127.0.0.1:``port`` until cancelled; a busy port is logged, not fatal."""

    def __init__(self, port: int, subject: _Subject, host: str = "127.0.0.1") -> None:
        self.port, self.host, self.subject = port, host, subject
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

    @property
    def bound_port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 2.0)
            path = line.split(b" ")[1] if line.count(b" ") >= 2 else b""
            body: dict[str, object]
            if path not in (b"/health", b"/"):
                status, body = "404 Not Found", {"error": "try /health"}
            else:
                ok = self.subject.healthy()
                status = "200 OK" if ok else "503 Service Unavailable"
                body = {"status": "ok" if ok else "dynamodb unreachable",
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
    parser = argparse.ArgumentParser(prog="python -m worker.health", description=__doc__)
    parser.add_argument("--port", type=int,
                        default=int(os.environ.get("HOLDFAST_HEALTH_PORT", "8081") or 8081))
    args = parser.parse_args(argv)
    return 0 if probe(args.port) else 1


if __name__ == "__main__":
    sys.exit(main())
