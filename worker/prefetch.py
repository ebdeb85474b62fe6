"""A successor's warm-up: the upstream opened from the holder's position, frames buffered
while the holder still delivers (make-before-break, ``holdfast.core.handoff``).

``Prefetch.open`` checks the URL as a connection would (``holdfast.core.urls``), takes a token
of the reconnect budget, dials and starts reading into a buffer; ``take`` stops reading and
hands the open socket and the buffer to the stream's ``Connection``, which delivers what is
above the holder's last seq and goes on reading. Nothing here calls the handler.

Reading stops at ``BUFFER_MAX_FRAMES`` or once the buffer holds
``holdfast.core.framebuffers.warm_up_buffer_bytes`` (half the frame limit, counted as memory):
the rest waits in the socket (the library's queue, then TCP back-pressure on the upstream), so
a long wait or a flood of large frames costs memory up to the bound the worker's memory check
counts, never frames. A socket the upstream closes during the warm-up is handed over closed:
the connection reconnects from its checkpoint as after any drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import WebSocketException

from holdfast.core.framebuffers import warm_up_buffer_bytes
from holdfast.core.handoff import BUFFER_MAX_FRAMES
from holdfast.core.urls import RESUME_URL_MAX_LEN, UrlPolicy, check_url
from holdfast.worker.dial import ConnectOptions, Resolver, dial, resolve_checked
from holdfast.worker.protocol import ResumeProtocol

if TYPE_CHECKING:
    from holdfast.worker.context import ConnectionContext

__all__ = ["Prefetch", "Prefetched"]


@dataclass
class Prefetched:
    """What a warm-up hands over: the open socket and the frames read so far, in order, and
    the seq it asked the upstream to resume from (None: wherever the upstream starts)."""

    ws: ClientConnection
    frames: Sequence[str | bytes]
    from_seq: int | None = None


@dataclass
class Prefetch:
    """One stream's warm-up connection (see the module)."""

    conn_id: str
    ws_url: str
    from_seq: int | None
    protocol: ResumeProtocol
    policy: UrlPolicy
    options: ConnectOptions
    resolve: Resolver
    worker_id: str
    max_frames: int = BUFFER_MAX_FRAMES
    max_bytes: int | None = None  # None: ``warm_up_buffer_bytes`` of the options' frame limit
    admit: Callable[[], Awaitable[float]] | None = None  # the fleet's connect budget
    frames: list[str | bytes] = field(default_factory=list)
    buffered_bytes: int = 0  # the buffer's memory (``sys.getsizeof``, not the wire's length)
    ws: ClientConnection | None = None
    _reader: asyncio.Task[None] | None = None
    _read_one: asyncio.Event = field(default_factory=asyncio.Event)  # a frame, or the end

    @classmethod
    def for_stream(cls, conn_id: str, ws_url: str, from_seq: int | None,
                   ctx: ConnectionContext) -> Prefetch:
        """A warm-up as the worker's connections make them: their protocol, URL policy,
        options, resolver and connect budget."""
        return cls(conn_id, ws_url, from_seq, ctx.protocol, ctx.policy, ctx.options,
                   ctx.resolve, ctx.worker_id, admit=ctx.admit_connect)

    async def open(self, timeout_s: float | None = None) -> None:
        """Take a token of the connect budget, then connect (within ``timeout_s``) and start
        buffering; raises what a connect raises (refused URL, OSError, a WebSocket error, a
        timeout)."""
        if self.admit is not None:
            await self.admit()
        url = self.protocol.url(self.ws_url, self.from_seq)
        checked = check_url(url, self.policy, max_len=RESUME_URL_MAX_LEN)
        async with asyncio.timeout(timeout_s):
            address = await resolve_checked(checked, self.policy, self.resolve)
            self.ws = await dial(url, address, checked.port,
                                 self.protocol.headers(self.from_seq), self.options,
                                 worker_id=self.worker_id)
            for first in self.protocol.first_frames(self.from_seq):
                await self.ws.send(first)
        self._reader = asyncio.get_running_loop().create_task(self._read(self.ws))

    async def _read(self, ws: ClientConnection) -> None:
        max_bytes = (warm_up_buffer_bytes(self.options.max_size) if self.max_bytes is None
                     else self.max_bytes)
        try:
            with contextlib.suppress(WebSocketException, OSError):
                async for frame in ws:
                    self.frames.append(frame)
                    self.buffered_bytes += sys.getsizeof(frame)
                    self._read_one.set()
                    if (len(self.frames) >= self.max_frames
                            or self.buffered_bytes >= max_bytes):
                        return  # the rest waits in the socket until the takeover
        finally:
            self._read_one.set()  # closed by the upstream: no frame is coming

    async def first_frame(self, timeout_s: float) -> str | bytes | None:
        """The first frame read, waiting up to ``timeout_s`` for it (None: none came, or the
        upstream closed first)."""
        if not self.frames and self._reader is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._read_one.wait()
        return self.frames[0] if self.frames else None

    async def _stop_reading(self) -> None:
        if self._reader is not None:
            # Cancelling a read loses nothing: websockets hands the frame to the next reader.
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None

    async def take(self) -> Prefetched:
        """Stop buffering and hand over the socket and the buffer (``open`` must have
        succeeded)."""
        await self._stop_reading()
        assert self.ws is not None
        return Prefetched(self.ws, self.frames, self.from_seq)

    async def close(self) -> None:
        """Drop the warm-up (not taken over): stop reading and close the socket."""
        await self._stop_reading()
        if self.ws is not None:
            with contextlib.suppress(WebSocketException, OSError):
                await self.ws.close()
            self.ws = None
