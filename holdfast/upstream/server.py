"""The demo upstream WebSocket server (loopback only).

Paths (``<id>`` is any stream id; query ``from_seq=N`` resumes at seq N):

- ``/s/<id>``        well-behaved: JSON text frames ``{"seq", "ts", "data"}`` at ``rate``/s;
- ``/garbage/<id>``  the same frames, each followed by junk (not JSON, binary, no/bad ``seq``);
- ``/huge/<id>``     a few good frames, then one frame of ``size`` bytes (default 2 MiB);
- ``/drop/<id>``     closes the connection (1011) after every ``every`` frames (default 5);
- ``/reject/<id>``   refuses the handshake with HTTP 503.

Every stream id has one timeline whatever the path, so a client moving between paths or
reconnecting sees the same seq n every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from holdfast.upstream.connlog import ConnLog, ConnRecord
from holdfast.upstream.feed import frame_for, head_seq, seq_due_s

__all__ = ["KINDS", "UpstreamServer"]

log = logging.getLogger(__name__)
KINDS = ("s", "garbage", "huge", "drop", "reject")
_GARBAGE: tuple[str | bytes, ...] = (
    "not json at all", b"\x00\x01binary", '{"seq": "seven"}', "[1, 2, 3]", '{"no_seq": true}',
    '{"seq": 1.5}', "{broken",
)
_REPLAY_CHUNK = 200  # frames sent before yielding to other connections during a replay


@dataclass(frozen=True, slots=True)
class _Route:
    kind: str
    stream_id: str
    from_seq: int | None
    size: int
    every: int


def _route(path: str) -> _Route | None:
    parts = urlsplit(path)
    kind, _, stream_id = parts.path.lstrip("/").partition("/")
    if kind not in KINDS or not stream_id or len(stream_id) > 200:
        return None
    query = parse_qs(parts.query)

    def num(name: str, default: int | None) -> int | None:
        try:
            return int(query[name][0]) if name in query else default
        except ValueError:
            return default

    from_seq = num("from_seq", None)
    return _Route(kind, stream_id, from_seq if from_seq is None or from_seq >= 0 else None,
                  num("size", 2 * 2**20) or 2 * 2**20, max(1, num("every", 5) or 5))


class UpstreamServer:
    """Serve sequenced streams on ``host:port`` (0: any free port). Async context manager."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, rate: float = 10.0,
                 conn_log: Path | None = None, compression: bool = False) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.host, self.requested_port, self.rate = host, port, rate
        self.connlog = ConnLog(conn_log)
        self.compression = compression
        self._starts: dict[str, tuple[float, int]] = {}  # id -> (monotonic s, wall ms)
        self._server: Server | None = None

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> UpstreamServer:
        self._server = await serve(
            self._serve, self.host, self.requested_port, process_request=self._check_path,
            compression="deflate" if self.compression else None, max_size=2**16,
            ping_interval=20, ping_timeout=20)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.connlog.close()

    async def __aenter__(self) -> UpstreamServer:
        return await self.start()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def url(self, stream_id: str, kind: str = "s") -> str:
        return f"ws://{self.host}:{self.port}/{kind}/{stream_id}"

    # -- stream timelines ----------------------------------------------------------------
    def start_of(self, stream_id: str) -> tuple[float, int]:
        """When ``stream_id`` was first seen: (monotonic seconds, wall milliseconds)."""
        if stream_id not in self._starts:
            self._starts[stream_id] = (time.monotonic(), time.time_ns() // 10**6)
        return self._starts[stream_id]

    def head(self, stream_id: str) -> int:
        start, _ = self.start_of(stream_id)
        return head_seq(time.monotonic() - start, self.rate)

    def frame(self, stream_id: str, seq: int) -> str:
        return frame_for(stream_id, seq, self.start_of(stream_id)[1], self.rate)

    # -- connections ---------------------------------------------------------------------
    def _check_path(self, connection: ServerConnection, request: Request) -> Response | None:
        route = _route(request.path)
        if route is None:
            return connection.respond(HTTPStatus.NOT_FOUND, "unknown path\n")
        if route.kind == "reject":
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "rejected\n")
        return None

    async def _serve(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        route = _route(ws.request.path)
        assert route is not None
        peer = ws.remote_address
        client = f"{peer[0]}:{peer[1]}" if peer else "?"
        rec = self.connlog.opened(route.stream_id, urlsplit(ws.request.path).path, client,
                                  ws.request.headers.get("X-Holdfast-Worker"), route.from_seq)
        # The feed may sleep between frames for 1/rate s: watch for the close separately so the
        # log says when the client went away, not when the next send noticed it.
        feed = asyncio.create_task(self._feed(ws, route, rec))
        closed = asyncio.create_task(ws.wait_closed())
        try:
            await asyncio.wait([feed, closed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.connlog.closed(rec)
            for task in (feed, closed):
                task.cancel()
            await asyncio.gather(feed, closed, return_exceptions=True)

    async def _feed(self, ws: ServerConnection, route: _Route, rec: ConnRecord) -> None:
        start, _ = self.start_of(route.stream_id)
        nxt = route.from_seq if route.from_seq is not None else self.head(route.stream_id)
        sent_here = 0
        while True:
            head = self.head(route.stream_id)
            while nxt <= head:
                await ws.send(self.frame(route.stream_id, nxt))
                rec.first_seq = nxt if rec.first_seq is None else rec.first_seq
                rec.last_seq, rec.sent = nxt, rec.sent + 1
                nxt += 1
                sent_here += 1
                if not await self._misbehave(ws, route, sent_here):
                    return
                if sent_here % _REPLAY_CHUNK == 0:
                    await asyncio.sleep(0)
            delay = start + seq_due_s(nxt, self.rate) - time.monotonic()
            await asyncio.sleep(max(delay, 0.0))

    async def _misbehave(self, ws: ServerConnection, route: _Route, sent: int) -> bool:
        """Send whatever this path adds after a good frame; False when the connection ends."""
        if route.kind == "garbage":
            await ws.send(_GARBAGE[sent % len(_GARBAGE)])
        elif route.kind == "huge" and sent == 3:
            await ws.send("x" * route.size)
        elif route.kind == "drop" and sent % route.every == 0:
            with contextlib.suppress(ConnectionClosed):
                await ws.close(1011, "dropped on purpose")
            return False
        return True
