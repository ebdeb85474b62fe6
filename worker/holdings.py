"""Claims: acquire a lease (the write: ``worker.acquiring``), start its connection, and run it
until it ends.

Each held stream is a ``Connection`` (the I/O) with its ``HeldStream`` (the lease state) in
``streams``, from the acquire until its last write (``worker.endings``: a release or a
transfer, decided by how it ended) has been written or given up.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from aws_lambda_powertools import Logger

from holdfast.core import names, tracing
from holdfast.core.exceptions import HoldfastError
from holdfast.core.model import Lease
from holdfast.core.orders import Order
from holdfast.core.store import LeaseStore
from holdfast.worker.acquiring import Acquired, Acquirer
from holdfast.worker.balancing import Balancing
from holdfast.worker.checkpointer import Checkpointer
from holdfast.worker.claimrules import Ours, Seen, refusal
from holdfast.worker.claims import SOURCE_HANDOFF, SOURCE_MOVED, Claim, Later
from holdfast.worker.config import WorkerConfig
from holdfast.worker.connection import Connection
from holdfast.worker.context import ConnectionContext
from holdfast.worker.endings import Endings
from holdfast.worker.handler import Handler
from holdfast.worker.held import SHUTDOWN, HeldStream, ordered_reason
from holdfast.worker.iothreads import logs_failure, on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.prefetch import Prefetched
from holdfast.worker.protocol import ResumeProtocol

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["CLAIM_LAG_LIMIT_MS", "Holdings"]

logger = Logger(service=WORKER_LOGGER, child=True)

# A loop this far behind is overloaded: it takes nothing more until it catches up. Claiming on
# regardless, a 5,000-stream claim storm on 2 shared cores lagged the loop 9 s (frames, handler
# calls and fences all that late) until the worker fenced itself; its nudges go to others.
CLAIM_LAG_LIMIT_MS: Final = 1_000


class Holdings:
    """The streams one worker holds. ``owner()`` is the ``lease_owner`` to acquire as (None:
    no live session, claim nothing); ``stopping()`` is True once the worker is stopping."""

    def __init__(self, config: WorkerConfig, store: LeaseStore, checkpointer: Checkpointer, *,
                 handler: Handler, protocol: ResumeProtocol, streams: dict[str, Connection],
                 owner: Callable[[], str | None], stopping: Callable[[], bool],
                 session_fence: Callable[[], int], wall: Callable[[], int],
                 mono: Callable[[], int], metrics: WorkerMetrics, counts: Counter[str],
                 balancing: Balancing,
                 admit_connect: Callable[[], Awaitable[float]] | None = None,
                 loop_lag_ms: Callable[[], int] = lambda: 0) -> None:
        self.config, self.store, self.checkpointer = config, store, checkpointer
        self.ctx = ConnectionContext.for_worker(
            config, handler=handler, protocol=protocol, metrics=metrics,
            anchor=self.checkpointer.anchor, mono=mono, admit_connect=admit_connect)
        self.balancing = balancing
        self.streams = streams
        self.owner, self.stopping, self.session_fence = owner, stopping, session_fence
        self.loop_lag_ms = loop_lag_ms
        self.wall, self.mono = wall, mono
        self.metrics, self.counts = metrics, counts
        self.tasks: set[asyncio.Task[None]] = set()
        self._claiming: set[str] = set()
        self._claims: set[asyncio.Task[Claim | Later]] = set()  # see ``claim``
        self._claims_paused = False
        # How each stream ends: its last write (release, transfer), one writer.
        self.endings = Endings(store, balancing, self.ctx.backoff,
                               single_connection=config.single_connection, metrics=metrics,
                               counts=counts, wall=wall, mono=mono,
                               release_mode=config.renew_mode)
        self.acquirer = Acquirer(config, store, self.ctx, self.endings, metrics=metrics,
                                 wall=wall, mono=mono, stopping=stopping)
        # The streams a handoff is bringing us (each holds a slot; set by the supervisor).
        self.incoming: Callable[[], set[str]] = set
        self._ordered: dict[str, Order] = {}  # see ``order_on_start``

    def free_capacity(self) -> int:
        if self.stopping() or self.owner() is None:
            return 0
        if self.balancing.draining or self._lagging():
            return 0
        # Not limited by a rebalancing share: a failover's or a new stream's nudge must be
        # claimed by whoever has room; only a moved stream's nudge is held to the share.
        return (self.config.max_connections - len(self.streams) - len(self._claiming)
                - len(self.incoming()))

    def _lagging(self) -> bool:
        """True while the loop lags past ``CLAIM_LAG_LIMIT_MS``; each pause is logged once."""
        lag = self.loop_lag_ms()
        lagging = lag > CLAIM_LAG_LIMIT_MS
        if lagging != self._claims_paused:
            self._claims_paused = lagging
            if lagging:
                self.metrics.incr(names.METRIC_CLAIMS_PAUSED_LAGGING)
                logger.warning("claims paused: event loop lagging", loop_lag_ms=lag,
                               limit_ms=CLAIM_LAG_LIMIT_MS)
            else:
                logger.info("claims resumed: event loop caught up", loop_lag_ms=lag)
        return lagging

    async def claim(self, conn_id: str, source: str = "nudge", *,
                    ws_url: str | None = None) -> Claim | Later:
        """Try to acquire ``conn_id`` and start holding it (in a ``claim`` span if tracing).
        ``ws_url``: an inserted nudge's URL (``worker.prestart`` connects without a read).

        Not cancelled with its caller (a stop cancels the loops that claim): an acquire sent
        may land, and must then reach its start, which hands the stream straight back if we
        are stopping. Cancelled at the await, the stream stayed owned by this session and held
        by nobody until the session ended and the sweeper reaped it."""
        task = asyncio.get_running_loop().create_task(self._traced(conn_id, source, ws_url))
        self._claims.add(task)
        task.add_done_callback(self._claims.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(logs_failure("a claim whose caller stopped waiting"))
            raise

    async def _traced(self, conn_id: str, source: str, ws_url: str | None) -> Claim | Later:
        span = tracing.start_span(names.SPAN_CLAIM, conn_id, worker_id=self.config.worker_id)
        if span is None:
            return await self._claim(conn_id, source, None, ws_url)
        try:
            outcome = await self._claim(conn_id, source, span, ws_url)
            span.set_attribute("holdfast.outcome", str(getattr(outcome, "value", outcome)))
            return outcome
        finally:
            span.end()

    async def _claim(self, conn_id: str, source: str, span: Span | None,
                     ws_url: str | None) -> Claim | Later:
        ours = self.streams.get(conn_id)
        moved = source == SOURCE_MOVED
        owner = self.owner()
        refused = refusal(Seen(
            ours=None if ours is None else Ours(
                stopping=ours.held.stopping, live=ours.held.live,
                past_fence=self.mono() >= ours.held.deadline()),
            in_flight=conn_id in self._claiming or conn_id in self.incoming(),
            moved=moved, shed_here=moved and self.balancing.refuses(conn_id),
            room_for_moves=self._room_for_moves() if moved else 1,
            free=self.free_capacity(), has_owner=owner is not None))
        if refused is not None or owner is None:
            return refused or Claim.NO_CAPACITY
        # Claiming until it is started: the connect-first start awaits its socket after the
        # acquire, and a second nudge seen then re-acquired the stream under a new epoch.
        self._claiming.add(conn_id)
        try:
            got = await self.acquirer.acquire(conn_id, owner, source, ws_url)
            if not isinstance(got, Acquired):
                return got
            self._start(got.lease, got.sent, source, span=span, warm=got.warm)
            return Claim.CLAIMED
        finally:
            self._claiming.discard(conn_id)

    def start_warm(self, lease: Lease, warm: Prefetched | None) -> None:
        """Hold a stream passed to us by a handoff (``worker.warmups``): the lease names us
        already; its connection starts on the warm socket, or (one connection at a time,
        ``warm`` None) connects from the transferred checkpoint."""
        self._start(lease, self.mono(), SOURCE_HANDOFF, warm=warm)

    def _start(self, lease: Lease, sent: int, source: str, *, span: Span | None = None,
               warm: Prefetched | None = None) -> None:
        """Start holding ``lease`` (its backstop written at ``sent``, mono)."""
        conn_id, owner = lease.conn_id, lease.owner
        if conn_id in self.streams:
            # Never two deliverers of one stream in one worker: the one running stays (if
            # its epoch is stale its next checkpoint ends it, and the strays pass takes the
            # stream back). Every caller checks before; this is the last line.
            logger.error("a second start of a held stream refused", conn_id=conn_id,
                         epoch=lease.epoch, source=source)
            if warm is not None:
                warm.ws.transport.abort()
            return
        self.metrics.incr(names.METRIC_CLAIMS)
        self.balancing.claimed(conn_id)
        self.counts["claimed"] += 1
        held = HeldStream(lease, fence_mono_ms=self.checkpointer.fence_after(sent),
                          session_fence=self.session_fence,
                          max_seq_jump=self.config.max_seq_jump)
        ordered = self._ordered.pop(conn_id, None)
        if self.stopping():  # the stop began while we were acquiring: hand it straight back
            held.drain(SHUTDOWN)
        elif self.owner() != owner:
            # The session was lost while we were acquiring: nobody else can own the stream
            # while it names our old owner, so we release it at once (never deliver).
            held.drain("session lost")
        elif ordered is not None and ordered.applies_to(lease.epoch):
            held.drain(ordered_reason(ordered))  # stopped while on its way: never delivers
        conn = Connection(held, self.ctx)
        conn.prefetched = warm
        conn.on_drained = functools.partial(self.endings.pass_on, socket_open=True)
        if span is not None:
            conn.trace = tracing.StreamTrace(span, conn_id, self.config.worker_id)
        self.streams[conn_id] = conn
        conn.log("info", "claimed", source=source, epoch=lease.epoch, last_seq=lease.last_seq,
                 unowned_ms=lease.unowned_ms, moved_at_ms=lease.moved_at_ms,
                 warm=warm is not None or None)
        task = asyncio.create_task(self._hold(conn), name=f"stream:{conn_id}")
        conn.task = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _room_for_moves(self) -> int:
        """Moved streams we may still take under our target's ceiling, claims in flight
        counted (a poll's ten nudges are claimed at once: each must see the others)."""
        room = self.balancing.room()
        return 1 if room is None else room - len(self._claiming)

    def order_on_start(self, order: Order) -> bool:
        """Keep a stop or release ``order`` for a stream on its way here (being claimed, or
        coming by a handoff: its acquire or transfer landed before the order was written, so
        the order is ours), to carry out when it starts; False if it is not on its way."""
        busy = self._claiming | self.incoming()
        for conn_id in [c for c in self._ordered if c not in busy]:
            del self._ordered[conn_id]  # its claim or handoff ended without a start
        if order.conn_id not in busy:
            return False
        self._ordered[order.conn_id] = order
        return True

    async def settled(self) -> None:
        """What a stop's goodbye waits for before the session ends: the claims in flight (one
        that lands is handed straight back, ``_start``), the streams they started, then the
        releases being sent. Not waited for, such a stream stayed owned by the ended session
        until the sweeper reaped it."""
        claiming = set(self._claiming)
        if self._claims:
            await asyncio.wait(list(self._claims))
        started = [c.task for i in claiming if (c := self.streams.get(i)) and c.task]
        if started:
            await asyncio.wait(started)
        await self.endings.releases.settled()

    def busy(self) -> set[str]:
        """The streams held, being claimed or coming by a handoff: not strays, whatever the
        owner index says."""
        return set(self.streams) | self._claiming | self.incoming()

    async def release_stray(self, conn_id: str, owner: str) -> bool:
        """Hand back a stray we will not hold (full, or one we shed). False if it was not ours
        to release, or the release failed (the next strays pass tries again)."""
        if conn_id in self.streams or conn_id in self._claiming:
            return False
        try:
            item = await on_io_threads(self.store.get, conn_id)
        except HoldfastError as exc:
            logger.warning("cannot read a stray", conn_id=conn_id, error=str(exc)[:300])
            return False
        if item is None or item.lease_owner != owner or conn_id in self.streams or (
                conn_id in self._claiming):
            return False
        return await self.endings.let_go(item, owner)

    # -- one stream's life -------------------------------------------------------------------
    async def _hold(self, conn: Connection) -> None:
        error: str | None = None
        try:
            error = await conn.run()
        except asyncio.CancelledError:
            conn.held.drain("cancelled")  # a no-op if it was already stopping
        except Exception as exc:  # a bug must cost one stream, never the worker
            error = f"internal error: {type(exc).__name__}: {exc}"[:500]
            conn.log("exception", "stream task failed")
        conn.held.close()
        if conn.trace is not None:
            conn.trace.close()
        try:
            await self.endings.finish(conn, error)
        finally:
            self.streams.pop(conn.conn_id, None)
            self.balancing.finished(conn.conn_id)
