"""A scripted upstream for one test: frames chosen per connection from its ``from_seq``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

__all__ = ["Script", "scripted_upstream"]

Frames = Callable[[int | None], Sequence[str | bytes]]


@dataclass
class Script:
    """The upstream's URL and the ``from_seq`` of every connection it accepted, in order."""

    url: str
    from_seqs: list[int | None] = field(default_factory=list)


@contextlib.asynccontextmanager
async def scripted_upstream(frames: Frames) -> AsyncIterator[Script]:
    """Serve ``frames(from_seq)`` on each connection, then keep it open until the client goes."""
    script = Script("")

    async def handle(ws: ServerConnection) -> None:
        query = parse_qs(urlsplit(ws.request.path if ws.request else "/").query)
        from_seq = int(query["from_seq"][0]) if "from_seq" in query else None
        script.from_seqs.append(from_seq)
        with contextlib.suppress(ConnectionClosed):
            for frame in frames(from_seq):
                await ws.send(frame)
            await ws.wait_closed()

    async with serve(handle, "127.0.0.1", 0, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        script.url = f"ws://127.0.0.1:{port}/s"
        yield script
