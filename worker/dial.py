"""Dialling an upstream: the checked address to connect to, no redirects, the options of a
connection, the frames a session reads, what a drop means (and the error of a stream given back
because a frame keeps killing its connection), and the closing handshake of a drained one.

Split from ``worker.connection`` (the connection task) to keep that module to the task itself.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, WebSocketException
from websockets.frames import CloseCode
from websockets.protocol import State

from holdfast.core import names
from holdfast.core.framebuffers import MAX_UNSENT_BYTES
from holdfast.core.urls import CheckedUrl, UrlPolicy, check_address
from holdfast.worker.iothreads import on_pool

__all__ = ["RESOLVER_THREADS", "RESOLVE_TIMEOUT_S", "BoundedConnection", "ConnectOptions",
           "NoRedirects", "Resolver",
           "close_reading", "describe", "dial", "frames_of", "getaddrinfo", "killed_again",
           "killed_by_a_frame", "resolve_checked"]

Resolver = Callable[[str, int], Awaitable[list[str]]]

# Lookups side by side, at most one per host name (``getaddrinfo``): a name whose servers never
# answer holds one thread until the OS gives up, however often its streams retry, and never
# makes other names' lookups queue behind it. Threads are made only when every one is busy.
RESOLVER_THREADS: Final = 64
RESOLVE_TIMEOUT_S: Final = 5.0
_RESOLVER_POOL: Final = ThreadPoolExecutor(max_workers=RESOLVER_THREADS,
                                           thread_name_prefix="holdfast-dns")
# The lookup in flight of each (host, port), per event loop (a test may run several loops).
_Lookups = dict[tuple[str, int], "asyncio.Future[list[str]]"]
_IN_FLIGHT: Final[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lookups]] = (
    weakref.WeakKeyDictionary())


# An upstream that does not read what we send: websockets answers each of its pings with a
# pong from the reader, with no back-pressure, so a ping flood from a peer that never reads
# grew one connection's write buffer by ~15 MB a second until the keepalive timed out (40 s).
# Past ``MAX_UNSENT_BYTES`` (counted in the task's memory check) the connection is aborted: a
# failure like any other, reconnected with back-off, given up after the usual count.


class BoundedConnection(ClientConnection):
    """A client connection that aborts once ``MAX_UNSENT_BYTES`` wait unsent (its write
    limit: asyncio calls ``pause_writing`` when the buffer passes it), and once a closing
    handshake it is owed passes ``close_timeout``: websockets sets that deadline when a frame
    fails the connection (too big, not UTF-8) but enforces it only when it next sends, so a
    peer that then went silent held the stream until the keepalive's next ping (20 s)."""

    _close_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.close_deadline is not None and self._close_timer is None:
            self._close_timer = self.loop.call_at(self.close_deadline, self._close_overdue)

    def _close_overdue(self) -> None:
        if self.protocol.state is not State.CLOSED:
            self.set_connection_exc(TimeoutError("timed out while closing connection"))
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._close_timer is not None:
            self._close_timer.cancel()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        self.set_connection_exc(ConnectionError(
            f"upstream not reading: more than {MAX_UNSENT_BYTES} bytes unsent (answers to a "
            "ping flood?)"))
        self.transport.abort()


class NoRedirects(connect):
    """``connect`` that never follows a redirect: the target was not checked by the policy."""

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    max_size: int = 2**18
    # websockets' default is 16 frames per connection; few are enough to keep a handler busy,
    # and the memory check counts them (``holdfast.core.framebuffers``).
    max_queue: int = 2
    compression: bool = False
    open_timeout_s: float = 10.0
    ping_interval_s: float = 20.0
    close_timeout_s: float = 2.0
    send_worker_id: bool = False  # opt-in: tells every upstream which worker connects


def dial(url: str, address: str, port: int, headers: dict[str, str], opts: ConnectOptions, *,
         worker_id: str) -> NoRedirects:
    """Open ``url`` at the checked ``address`` (``async with``), never redirected."""
    if opts.send_worker_id:
        headers = {"X-Holdfast-Worker": worker_id, **headers}
    return NoRedirects(
        url, host=address, port=port, additional_headers=headers,
        compression="deflate" if opts.compression else None, max_size=opts.max_size,
        max_queue=opts.max_queue,
        open_timeout=opts.open_timeout_s, ping_interval=opts.ping_interval_s,
        ping_timeout=opts.ping_interval_s, close_timeout=opts.close_timeout_s,
        proxy=None, user_agent_header="holdfast-worker",
        write_limit=MAX_UNSENT_BYTES, create_connection=BoundedConnection)


async def getaddrinfo(host: str, port: int) -> list[str]:
    """The addresses of ``host``, resolved on threads of their own within
    ``RESOLVE_TIMEOUT_S``; an ``OSError`` saying why not (the connect fails, the stream backs
    off). Not the loop's default executor, which a handler's ``asyncio.to_thread`` calls can
    fill; not the worker's I/O threads either: a name whose servers do not answer blocks its
    thread for the OS resolver's whole timeout, and a few such streams on their back-off held
    every claim, release and handoff transfer of the worker behind them. One lookup per name
    at a time, shared by every stream asking meanwhile: ten such names, each retried, took
    every thread of a pool of 8 and other names' lookups timed out behind them."""
    lookups = _IN_FLIGHT.setdefault(asyncio.get_running_loop(), {})
    lookup = lookups.get((host, port))
    if lookup is None:
        if len(lookups) >= RESOLVER_THREADS:
            raise OSError(f"{len(lookups)} lookups unanswered, e.g. of "
                          f"{', '.join(sorted({h for h, _ in lookups})[:3])}: not queued "
                          "behind them")
        lookup = asyncio.ensure_future(_lookup(host, port))
        lookups[(host, port)] = lookup
        lookup.add_done_callback(functools.partial(_done, lookups, (host, port)))
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            return await asyncio.shield(lookup)  # one caller's timeout ends no other's wait
    except TimeoutError:
        raise OSError(f"no answer within {RESOLVE_TIMEOUT_S:g} s") from None


async def _lookup(host: str, port: int) -> list[str]:
    infos = await on_pool(_RESOLVER_POOL, socket.getaddrinfo, host, port,
                          type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _done(lookups: _Lookups, key: tuple[str, int], lookup: asyncio.Future[list[str]]) -> None:
    """The next ask of ``key`` looks up again; an error nobody waited for any more is read."""
    if lookups.get(key) is lookup:
        del lookups[key]
    if not lookup.cancelled():
        lookup.exception()


async def resolve_checked(checked: CheckedUrl, policy: UrlPolicy, resolve: Resolver) -> str:
    """The address to connect to; ``UnsafeUrl`` if the host resolves anywhere it must not."""
    if checked.address is not None:
        return str(checked.address)
    try:
        addresses = await resolve(checked.host, checked.port)
    except OSError as exc:
        raise OSError(f"cannot resolve {checked.host}: {exc}") from None
    if not addresses:
        raise OSError(f"{checked.host} resolves to no address")
    # Any forbidden address refuses the host: a name that also points at the metadata
    # service is hostile, whichever address the OS would pick.
    for address in addresses:
        check_address(address.split("%", 1)[0], policy, url=checked.url,
                      name_allowed=checked.name_allowed)
    return addresses[0]


def killed_by_a_frame(exc: BaseException) -> bool:
    """We closed the connection over a frame: too big (1009) or not UTF-8 text (1007)."""
    sent = exc.sent if isinstance(exc, ConnectionClosedError) else None
    return sent is not None and sent.code in (CloseCode.MESSAGE_TOO_BIG,
                                              CloseCode.INVALID_DATA)


def killed_again(resume_at: int | None, deaths: int, error: str) -> str:
    """The stream's ``last_error`` once a frame has killed its connection ``deaths`` times in a
    row from ``resume_at``: never skipped unhandled, so it says how to get past it."""
    where = "before the first seq" if resume_at is None else f"resuming from seq {resume_at}"
    return (f"a frame kills the connection {where} ({deaths} times in a row), not skipped: "
            f"{error}. Fix the upstream, raise {names.ENV_MAX_FRAME_BYTES} if the frame is "
            "only too big, or skip it: holdfast resume <id> --now --after-seq <its seq>")


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


async def close_reading(ws: ClientConnection) -> None:
    """The closing handshake of a drained stream, reading (and dropping) what still arrives.

    Frames nobody reads fill websockets' receive queue; past ``max_queue`` (2 by default) it
    pauses reading, the peer's Close frame is never seen, and ``close()`` waits out the whole
    ``close_timeout`` (2 s) before it aborts: the release, and the handover, wait with it. A
    frame dropped here was never handled, so never checkpointed: the next holder resumes it.
    """
    closing = asyncio.ensure_future(ws.close())
    try:
        async for _ in ws:
            pass
    except WebSocketException:
        pass
    except BaseException:
        closing.cancel()  # cancelled again (the stop's deadline): the caller's exit closes
        raise
    await closing


async def frames_of(buffered: Sequence[str | bytes], ws: ClientConnection,
                    ) -> AsyncIterator[str | bytes]:
    """A warm-up's buffered frames (``worker.prefetch``), then what ``ws`` reads."""
    for frame in buffered:
        yield frame
    if isinstance(buffered, list):
        # Delivered: the warm-up's frames would otherwise stay referenced (here, and by the
        # caller's Prefetched) for as long as the connection lives, days on a quiet stream.
        buffered.clear()
    async for frame in ws:
        yield frame
