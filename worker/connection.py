"""The connection task of one held stream: connect to ``ws_url``, resume, call the handler.

The stream's lease state is its ``HeldStream`` (``worker.held``); each frame read goes to
``worker.handling`` (the delivery rules and the handler calls); this module holds the socket:
connect, read, reconnect, and the supervisor's controls (drain, abort, fence, lose). Drops are
retried with jittered back-off while the lease is kept. A stream that cannot make progress
(``max_failures`` drops in a row, ``poison_replays`` deaths by one frame, a stall on broken
seqs, a handler that keeps failing under the park policy) is given up: ``run`` returns the
error and the supervisor hands the lease back (BACKOFF, ``last_error``). Dialling, what a drop
means (and a frame that keeps killing the connection), and the frames a session reads (a warm-up's
buffer, then the socket) are ``worker.dial``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aws_lambda_powertools import Logger
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidURI, WebSocketException

from holdfast.core import names
from holdfast.core.exceptions import UnsafeUrl
from holdfast.core.tracing import StreamTrace
from holdfast.core.urls import RESUME_URL_MAX_LEN, check_url, redact
from holdfast.worker.backoff import Drops
from holdfast.worker.context import ConnectionContext
from holdfast.worker.dial import (
    close_reading,
    describe,
    dial,
    frames_of,
    killed_again,
    killed_by_a_frame,
    resolve_checked,
)
from holdfast.worker.handling import GiveUp, Handling
from holdfast.worker.held import HeldStream
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.prefetch import Prefetched

__all__ = ["FRAMES_PER_TURN", "LOG_EVERY_MS", "STABLE_CONNECTION_MS", "Connection"]

logger = Logger(service=WORKER_LOGGER, child=True)
# Buffered frames delivered before the stream gives the loop a turn (see ``_session``): a loop
# round with every stream replaying is at most this many handler calls per stream.
FRAMES_PER_TURN = 8
LOG_EVERY_MS = 60_000  # a per-frame warning is logged at most this often per stream and kind
# A connection that stayed up this long was not flapping, whatever it delivered (an upstream
# without seqs): its drop resets the back-off to the base delay (``Drops``; a shorter one's
# progress only bounds it). From the handshake's end: an attempt that never opened (a handshake
# hanging to its timeout, 10 s by default) held nothing, and counted it was retried for ever.
STABLE_CONNECTION_MS = 10_000


class Connection:
    """The connection task of one held stream; its lease state is ``held`` (``worker.held``)."""

    def __init__(self, held: HeldStream, ctx: ConnectionContext) -> None:
        self.conn_id = held.lease.conn_id
        self.held = held
        self.ctx = ctx
        self.task: asyncio.Task[Any] | None = None  # set by the supervisor
        self.trace: StreamTrace | None = None  # tracing on: until the first handled message
        self.ended = False  # ``run`` has returned: what is left is the release
        # ``run`` has begun. Until then a stop must not cancel the task: a task cancelled
        # before its first step never runs its coroutine, so the holding's end (the release,
        # leaving the worker's streams) never ran and the stream stayed held by nobody.
        self.running = False
        self._ws: ClientConnection | None = None
        self._opened_ms: int | None = None  # when the socket of the current attempt opened
        # A make-before-break handoff's open socket and buffer: the first session uses them.
        self.prefetched: Prefetched | None = None
        # Set by a handoff in progress (``worker.handoff``): the successor it drains for.
        self.handoff_to: str | None = None
        # Called once a drain has stopped delivery, before the socket's closing handshake:
        # a handoff passes the lease here, so the successor never waits for the close.
        self.on_drained: Callable[[Connection], Awaitable[None]] | None = None
        # The handoff's transfer: "passing" while in flight, then its outcome.
        self.passed: str | None = None
        self.handling = Handling(self)  # each frame: the delivery rules, the handler calls
        # A drain waiting for the next frame (``drain_after_frame``): its reason and the timer
        # that drains anyway.
        self._drain_next: tuple[str, asyncio.TimerHandle] | None = None
        # Per-frame warnings, per kind: when last logged (monotonic ms), and how many since.
        self._logged: dict[str, tuple[int, int]] = {}

    # -- control, called by the supervisor, the checkpointer and the session -------------
    def drain(self, reason: str) -> None:
        """Stop after the handler call in flight returns; the connection is closed cleanly."""
        self.held.drain(reason)
        if (self.task is not None and self.running and not self.handling.in_call
                and not self.ended):
            self.task.cancel()  # waiting for a frame or a reconnect: nothing in flight to keep

    def drain_to(self, successor: str | None, reason: str) -> None:
        """``drain``, then release to ``successor`` by name (None or "": to nobody; the
        successor is decided now, not again at the release)."""
        self.handoff_to = successor or ""
        self.drain(reason)

    def drain_after_frame(self, reason: str, within_s: float) -> None:
        """Drain right after the next frame with a seq is handled (``STOP_AFTER_FRAME_WAIT_MS``,
        any frame on a stream without seqs); at once if such a call is in flight (it ends
        one), if not connected, or if none comes in time."""
        if ((self.handling.in_call and self._at_stop_point()) or self._ws is None
                or self.held.stopping or self.ended):
            self.drain(reason)
            return
        if self._drain_next is None:
            timer = asyncio.get_running_loop().call_later(within_s, self._drain_waiting, False)
            self._drain_next = (reason, timer)

    def _at_stop_point(self) -> bool:
        """The last frame taken carried a seq (or the stream has none): a handoff may stop
        after it, the successor skipping everything up to the checkpoint."""
        return self.handling.after_seq or self.held.cursor.checkpoint is None

    def _drain_waiting(self, in_task: bool) -> None:
        waiting, self._drain_next = self._drain_next, None
        if waiting is None:
            return
        reason, timer = waiting
        timer.cancel()
        if self.held.stopping:
            return  # drained meanwhile for another reason
        if in_task:
            self.held.drain(reason)  # the read loop itself: it stops after this frame
        else:
            self.drain(reason)

    def abort(self, reason: str) -> None:
        """Stop now, no more handler calls (the shutdown budget ran out, or its checkpoint was
        moved past ours): still ours, so its end releases it."""
        self.held.abort(reason)
        self._kill()

    def fence(self) -> None:
        """Past the fence deadline: stop now, someone else may hold the lease. Counted
        (``LeasesFenced``) here, once, whoever found it."""
        if self.held.fence():
            self.ctx.metrics.incr(names.METRIC_LEASES_FENCED)
        self._kill()

    def lose(self, why: str) -> None:
        """Not ours any more: stop now. Counted (``LeasesLost``) here, once, whoever found
        it."""
        if self.held.lose(why):
            self.ctx.metrics.incr(names.METRIC_LEASES_LOST)
        self._kill()

    def _kill(self) -> None:
        """Drop the connection and cancel the handler call in flight (whatever the state was:
        a second stop of a stopped stream costs nothing)."""
        if self._ws is not None:
            self._ws.transport.abort()
        if self.task is not None and self.running and not self.ended:
            self.task.cancel()

    def log(self, level: str, msg: str, **extra: Any) -> None:
        getattr(logger, level)(msg, conn_id=self.conn_id, worker_id=self.ctx.worker_id,
                               stacklevel=3, **extra)

    def log_limited(self, key: str, level: str, msg: str, **extra: Any) -> None:
        """Log at most once per ``LOG_EVERY_MS`` for this stream and ``key``; the next line
        says how many were left out (``suppressed``)."""
        now = self.ctx.mono()
        last, left_out = self._logged.get(key, (None, 0))
        if last is not None and now - last < LOG_EVERY_MS:
            self._logged[key] = (last, left_out + 1)
            return
        self._logged[key] = (now, 0)
        self.log(level, msg, suppressed=left_out, **extra)

    # -- the task ------------------------------------------------------------------------
    async def run(self) -> str | None:
        """Hold the stream until stopped (returns None) or given up (returns the error)."""
        self.running = True
        drops, deaths = Drops(), 0
        poison_at: int | None = None  # the resume point of the last death by a frame
        poison_handled = -1  # the handler calls done at that death
        held = self.held
        held.started()  # a no-op if it stopped before it started (shutdown, session lost)
        try:
            while not held.stopping:
                before, killed = held.cursor.checkpoint, False
                self._opened_ms = None  # set by _read once this attempt's socket is open
                try:
                    await self._session()
                    error = held.cursor.closed_why(before)
                except (UnsafeUrl, InvalidURI) as exc:
                    msg = str(exc) if isinstance(exc, UnsafeUrl) else (
                        "ws_url refused: not a valid WebSocket URI: "
                        f"{redact(held.lease.ws_url, paths=self.ctx.policy.log_paths)}")
                    self.log("warning", "ws_url refused", error=msg)
                    return msg
                except GiveUp as exc:
                    if held.stopping:
                        break
                    self.log("error", exc.why, error=str(exc))
                    return str(exc)
                except (OSError, TimeoutError, WebSocketException) as exc:
                    error, killed = describe(exc), killed_by_a_frame(exc)
                if held.stopping:
                    break
                # Progress is a seq handled past the checkpoint, or a connection that held:
                # a seq-less frame alone (a hello, an upstream's error text) is not, or an
                # upstream that sends one and closes was reconnected every 0.5 s for ever.
                drops = drops.after(held.cursor.checkpoint != before, self._opened_ms is not None
                                    and self.ctx.mono() - self._opened_ms >= STABLE_CONNECTION_MS)
                if killed:  # by a frame; again at the same resume point: the same frame
                    # A stream without seqs has no resume point: a death is "again" only if
                    # nothing was handled since the last (or deaths hours apart add up).
                    again = held.cursor.next_seq == poison_at and (
                        poison_at is not None or held.cursor.handled == poison_handled)
                    deaths = deaths + 1 if again else 1
                    poison_at, poison_handled = held.cursor.next_seq, held.cursor.handled
                    if deaths >= self.ctx.poison_replays:  # given up, never skipped unhandled
                        self.log("error", "a frame keeps killing the connection, giving the "
                                 "stream back", from_seq=poison_at, deaths=deaths, error=error)
                        return killed_again(poison_at, deaths, error)
                self.ctx.metrics.incr(names.METRIC_RECONNECTS)
                if self.ctx.backoff.give_up(drops.failures):
                    self.log("warning", "upstream failing, giving the stream back",
                             error=error, failures=drops.failures)
                    return f"{drops.failures} connection failures, last: {error}"
                delay = self.ctx.backoff.reconnect_s(drops)
                self.log("info", "upstream dropped, reconnecting", error=error,
                         failures=drops.failures, short=drops.short, delay_s=round(delay, 3))
                await self.ctx.sleep(delay)
        except asyncio.CancelledError:
            if not held.stopping:
                raise  # cancelled from outside (second signal): not ours to swallow
        finally:
            self.ended = True
            if self.prefetched is not None:  # stopped before its first session: not used
                self.prefetched.ws.transport.abort()
                self.prefetched = None
        return None

    async def _session(self) -> None:
        warm, self.prefetched = self.prefetched, None
        if warm is not None:  # taken over from a warm-up: the socket is open already
            self.log("info", "connected (warmed up)", buffered=len(warm.frames))
            try:
                await self._read(warm.ws, warm.frames, resumed_from=warm.from_seq)
            finally:
                await warm.ws.close()
            return
        next_seq = self.held.cursor.next_seq
        proto = self.ctx.protocol
        url = proto.url(self.held.lease.ws_url, next_seq)
        checked = check_url(url, self.ctx.policy, max_len=RESUME_URL_MAX_LEN)
        if self.trace is not None:
            self.trace.connecting()
        address = await resolve_checked(checked, self.ctx.policy, self.ctx.resolve)
        if self.ctx.admit_connect is not None and await self.ctx.admit_connect() > 0:
            self.ctx.metrics.incr(names.METRIC_CONNECTS_DELAYED)
        async with dial(url, address, checked.port, proto.headers(next_seq), self.ctx.options,
                        worker_id=self.ctx.worker_id) as ws:
            self.log("info", "connected", url=redact(url, paths=self.ctx.policy.log_paths),
                     from_seq=next_seq)
            await self._read(ws, (), proto.first_frames(next_seq))

    async def _read(self, ws: ClientConnection, buffered: Sequence[str | bytes],
                    first: Sequence[str | bytes] = (), *,
                    resumed_from: int | None = None) -> None:
        """Deliver ``buffered`` (a warm-up's, ``worker.prefetch``, opened ``resumed_from``
        a seq the holder went on past), then what ``ws`` reads."""
        self._ws, self._opened_ms = ws, self.ctx.mono()
        self.held.cursor.connected(resumed_from)
        if self.trace is not None:
            self.trace.connected()
        try:
            for frame in first:
                await ws.send(frame)
            try:
                n = 0
                async for frame in frames_of(buffered, ws):
                    await self.handling.frame(frame)
                    if self._drain_next is not None and self._at_stop_point():
                        self._drain_waiting(True)
                    if self.held.stopping:
                        break
                    n += 1
                    if n % FRAMES_PER_TURN == 0:
                        # One socket read can hold hundreds of frames (a replay after a
                        # failover), and taking a buffered frame never suspends: without
                        # this turn one replaying stream kept claims, heartbeats' stamps
                        # and every other stream waiting until its whole backlog was done.
                        await asyncio.sleep(0)
            except asyncio.CancelledError:
                if not (self.held.stopping and self.held.live):
                    raise  # aborted, fenced, lost, or cancelled from outside
            if self.held.stopping and self.held.live:
                if self.on_drained is not None:
                    await self.on_drained(self)
                await close_reading(ws)
        finally:
            self._ws = None
