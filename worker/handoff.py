"""Make-before-break handoffs, both sides (the protocol: ``holdfast.core.handoff``).

**Holder.** ``offer(conn, successor, reason)`` replaces a drain when the decider named a
successor (a shed, a drain, a SIGTERM): the stream keeps delivering while WARM goes to the
successor's order queue. On READY the stream drains with the reason ``HANDOFF`` right after
its next frame (``STOP_AFTER_FRAME_WAIT_MS``: the transfer and TAKE then fit in the gap to the
frame after it) and ``Holdings`` calls ``transfer``: one conditional write passes the lease
(``store.transfer``), then TAKE tells the successor. ABORT, or no READY within
``WARM_TIMEOUT_MS``, and the stream drains for its original reason and is released to whoever
has room (the successor refused, or is too slow to be trusted with the hold of a named
release).

**Successor.** WARM is checked (room, the item still names the holder at that epoch, the
stream allows two connections), then a ``Prefetch`` opens the upstream from the holder's
position and READY goes back. TAKE from the holder we warmed up for, past that epoch: the
stream starts on the warm socket at once, its lease made of the warm-up's read and TAKE (the
holder sends TAKE only after its write landed). Any other TAKE: the item is read back first
(it must name us at TAKE's epoch); one without a warm-up (dropped meanwhile) is claimed as our
own stray. A TAKE late by ``TAKE_CHECK_MS`` after READY is looked for in the table, once per
``TAKE_CHECK_MS``: the item names us past that epoch (the transfer landed; its TAKE was lost, or
the holder died right after writing it): taken as if TAKE had come; nobody (the holder died
before its transfer and was reaped): the warm-up is dropped and the stream claimed, an
ordinary failover instead of one that waits for ``TAKE_TIMEOUT_MS`` (a nudge for a stream we
warm up for is refused meanwhile); another owner, or no item: dropped. A warm-up never taken
over is closed after ``TAKE_TIMEOUT_MS``.

Not possible (no order queues, a stream without a position yet, ``single_connection``):
``offer`` says False and the caller drains and releases naming the successor (break-before-
make, ``store.release``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.core.bundles import Letter
from holdfast.core.exceptions import HoldfastError, LeaseLost, MalformedItem
from holdfast.core.handoff import (
    ABORT,
    READY,
    STOP_AFTER_FRAME_WAIT_MS,
    TAKE,
    TAKE_CHECK_MS,
    TAKE_TIMEOUT_MS,
    WARM,
    WARM_TIMEOUT_MS,
    HandoffStep,
)
from holdfast.core.model import Lease, LeaseItem, bool_attr, int_attr, weight_of
from holdfast.core.nudge import REASON_HANDOFF, Nudge
from holdfast.core.schema import ATTR
from holdfast.worker.balancing import HANDOFF, SHED
from holdfast.worker.held import SHUTDOWN
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.prefetch import Prefetch, Prefetched

if TYPE_CHECKING:
    from holdfast.core.store import LeaseStore
    from holdfast.worker.connection import Connection, ConnectionContext
    from holdfast.worker.outbox import Outbox

__all__ = ["Handoffs"]

logger = Logger(service="holdfast-worker", child=True)
_TICK_S = 0.2


@dataclass
class _Offer:
    successor: str
    epoch: int
    reason: str  # the drain reason if it falls through (shed, shutdown)
    deadline_ms: int


@dataclass
class _Warm:
    prefetch: Prefetch
    holder: str
    epoch: int
    deadline_ms: int
    item: LeaseItem  # as the warm-up read it: what TAKE does not say
    weight: float
    check_ms: int = 0  # when to look in the table for a TAKE that has not come


class Handoffs:
    """Both sides of this worker's make-before-break handoffs (see the module)."""

    def __init__(self, *, outbox: Outbox, store: LeaseStore,
                 streams: dict[str, Connection], ctx: ConnectionContext,
                 owner: Callable[[], str | None], room: Callable[[], int],
                 start: Callable[[Lease, Prefetched], None],
                 claim: Callable[[str], Awaitable[object]],
                 mono: Callable[[], int], single_connection: bool,
                 withdraws: Callable[[str, str], bool] = lambda _conn, _to: False) -> None:
        self.outbox = outbox
        self.store, self.streams, self.ctx = store, streams, ctx
        self.owner, self.room, self.start, self.claim = owner, room, start, claim
        self.mono, self.single_connection = mono, single_connection
        self.withdraws = withdraws  # a shed whose successor the decider dropped (at READY)
        self.offers: dict[str, _Offer] = {}
        self.warming: dict[str, _Warm] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._taking: set[str] = set()  # TAKE received, the item being read back

    # -- holder ---------------------------------------------------------------------------
    def offer(self, conn: Connection, successor: str, reason: str) -> bool:
        """Start handing ``conn`` to ``successor`` make-before-break; False if it cannot be."""
        me, lease = self.owner(), conn.held.lease
        single = (lease.single_connection if lease.single_connection is not None
                  else self.single_connection)
        from_seq = conn.held.cursor.next_seq
        if (me is None or single or from_seq is None or successor == me
                or conn.conn_id in self.offers or not conn.held.live or conn.held.stopping):
            return False
        self.offers[conn.conn_id] = _Offer(successor, lease.epoch, reason,
                                           self.mono() + WARM_TIMEOUT_MS)
        self._send(successor, HandoffStep(WARM, conn.conn_id, lease.epoch, from_seq, me))
        conn.log("info", "handing over (warming up the successor)", successor=successor,
                 from_seq=from_seq, why=reason)
        return True

    async def offer_at_stop(self, conns: list[Connection], successor: Callable[[], str | None],
                            *, until_ms: int, at_once: int) -> list[Connection]:
        """A stop: offer ``conns`` warm to the successors the decider named, ``at_once`` in
        flight, the next as one ends, until ``until_ms`` (monotonic). A stream that cannot go
        warm is drained for its named successor at once. Returns those not reached (the
        caller drains them): each waits delivering, so waiting is no gap."""
        left = list(reversed(conns))
        while left and self.mono() < until_ms:
            if len(self.offers) >= at_once:
                await asyncio.sleep(0.02)
                continue
            conn = left.pop()
            if conn.ended or conn.held.stopping or conn.conn_id in self.offers:
                continue  # gone, stopping, or already being handed over (a shed)
            named = successor()
            if named is None:
                left.append(conn)
                break
            if not self.offer(conn, named, SHUTDOWN):
                conn.handoff_to = named
                conn.drain(SHUTDOWN)
        return list(reversed(left))

    async def transfer(self, conn: Connection) -> str:
        """The stream stopped delivering for its handoff: pass the lease on, tell the
        successor. "transferred", "lost" (not ours any more) or "failed" (still ours: the
        caller releases it)."""
        successor, held, me = conn.handoff_to, conn.held, self.owner()
        self.offers.pop(conn.conn_id, None)
        if not successor or me is None:
            return "lost"  # our session is gone meanwhile: nothing of it may be passed on
        try:
            passed = await on_io_threads(self.store.transfer, held.lease, held.checkpoint,
                                         successor)
        except LeaseLost as lost:
            conn.log("warning", "handoff: the stream was not ours any more", reason=lost.reason)
            self._send(successor, HandoffStep(ABORT, conn.conn_id, held.lease.epoch, None, me))
            return "lost"
        except HoldfastError as exc:
            conn.log("warning", "handoff: transfer failed, releasing instead",
                     error=str(exc)[:300])
            self._send(successor, HandoffStep(ABORT, conn.conn_id, held.lease.epoch, None, me))
            return "failed"
        self._send(successor, HandoffStep(TAKE, conn.conn_id, passed.epoch, passed.last_seq, me,
                                          passed.moved_at_ms))
        self.ctx.metrics.incr(names.METRIC_STREAMS_HANDED_OFF)
        conn.log("info", "handed over", successor=successor, last_seq=passed.last_seq,
                 epoch=passed.epoch)
        return "transferred"

    def _fall_through(self, conn_id: str, why: str) -> None:
        """The warm-up failed: drain for the original reason and release to whoever has room.
        Not to the successor: it refused, or did not answer in time and was told to drop its
        warm-up, so naming it could cost the stream the whole hold."""
        offer = self.offers.pop(conn_id, None)
        conn = self.streams.get(conn_id)
        if offer is None or conn is None or not conn.held.live or conn.held.stopping:
            return
        conn.handoff_to = ""
        conn.log("info", "handoff not warm, releasing instead", why=why,
                 successor=offer.successor)
        conn.drain(offer.reason)

    # -- messages ---------------------------------------------------------------------------
    def on_step(self, step: HandoffStep) -> None:
        """A handoff message from our order queue."""
        if step.kind == READY:
            offer, conn = self.offers.get(step.conn_id), self.streams.get(step.conn_id)
            if offer is None or offer.successor != step.peer or offer.epoch != step.epoch:
                return  # timed out or aborted meanwhile: the successor got an ABORT
            withdrawn = offer.reason == SHED and self.withdraws(step.conn_id, offer.successor)
            if conn is None or not conn.held.live or conn.held.stopping or withdrawn:
                # Gone; or a shed whose successor the decider no longer names (a deploy began
                # meanwhile: that old worker will stop too): we keep the stream.
                self.offers.pop(step.conn_id, None)
                self._send(step.peer, HandoffStep(ABORT, step.conn_id, step.epoch, None,
                                                  self.owner() or ""))
                return
            conn.handoff_to = step.peer
            conn.drain_after_frame(HANDOFF, STOP_AFTER_FRAME_WAIT_MS / 1000)
        elif step.kind == ABORT:
            if step.conn_id in self.offers:
                self._fall_through(step.conn_id, "the successor refused")
            warm = self.warming.pop(step.conn_id, None)
            if warm is not None:
                self._spawn(warm.prefetch.close())
        elif step.kind == WARM:
            self._spawn(self._warm_up(step))
        elif step.kind == TAKE:
            self._spawn(self._take(step))

    # -- successor --------------------------------------------------------------------------
    async def _warm_up(self, step: HandoffStep) -> None:
        me = self.owner()
        if (me is None or step.conn_id in self.streams or step.conn_id in self.warming
                or self.room() <= 0):
            self._send(step.peer, HandoffStep(ABORT, step.conn_id, step.epoch, None, me or ""))
            return
        prefetch: Prefetch | None = None
        try:
            raw = await on_io_threads(self.store.get_raw, step.conn_id)
            item = LeaseItem.from_ddb(raw) if raw is not None else None
            single = bool_attr(raw or {}, ATTR.single_connection)
            if (item is None or not item.started or item.lease_owner != step.peer
                    or item.epoch != step.epoch or single):
                raise HoldfastError("the item does not name the holder at that epoch, or "
                                    "allows one connection at a time")
            prefetch = Prefetch.for_stream(step.conn_id, item.ws_url, step.seq, self.ctx)
            deadline = self.mono() + TAKE_TIMEOUT_MS
            self.warming[step.conn_id] = _Warm(prefetch, step.peer, step.epoch, deadline,
                                               item, weight_of(raw or {}), check_ms=deadline)
            await prefetch.open(WARM_TIMEOUT_MS / 1000)
        except Exception as exc:  # whatever it was, it costs a fallback, never the worker
            self.warming.pop(step.conn_id, None)
            if prefetch is not None:
                await prefetch.close()
            logger.info("handoff: cannot warm up", conn_id=step.conn_id, holder=step.peer,
                        error=f"{type(exc).__name__}: {exc}"[:300])
            self._send(step.peer, HandoffStep(ABORT, step.conn_id, step.epoch, None, me))
            return
        if (warm := self.warming.get(step.conn_id)) is not None:  # not aborted meanwhile
            logger.info("handoff: warmed up", conn_id=step.conn_id, holder=step.peer,
                        from_seq=step.seq)
            warm.check_ms = self.mono() + TAKE_CHECK_MS
            self._send(step.peer, HandoffStep(READY, step.conn_id, step.epoch, None, me))

    def incoming(self) -> set[str]:
        """Streams on their way to us by a handoff (warming up, or being taken over): not
        strays, whatever the owner index says, and not to be claimed meanwhile."""
        return self.warming.keys() | self._taking

    async def _take(self, step: HandoffStep) -> None:
        self._taking.add(step.conn_id)
        try:
            claim = await self._take_warm(step)
        finally:
            self._taking.discard(step.conn_id)
        if claim:
            await self.claim(step.conn_id)  # ours without a usable warm-up: taken back

    async def _take_warm(self, step: HandoffStep) -> bool:
        """Start the stream on its warm socket; True: claim it instead (it is ours, but not
        at that epoch, or there is no warm socket)."""
        warm = self.warming.pop(step.conn_id, None)
        me = self.owner()
        if (warm is not None and me is not None and warm.prefetch.ws is not None
                and step.peer == warm.holder and step.epoch > warm.epoch
                and step.at is not None):
            # The holder we warmed up for wrote the transfer: no read in the gap.
            known = warm.item
            self.start(Lease(known.conn_id, me, step.epoch, step.at + self.store.lease_ms,
                             known.ws_url, step.seq, known.error_count, unowned_ms=0,
                             weight=warm.weight, moved_at_ms=step.at),
                       await warm.prefetch.take())
            return False
        try:
            raw = await on_io_threads(self.store.get_raw, step.conn_id)
            item = LeaseItem.from_ddb(raw) if raw is not None else None
        except (HoldfastError, MalformedItem) as exc:
            logger.warning("handoff: cannot read the stream taken over; the strays pass "
                           "takes it back", conn_id=step.conn_id, error=str(exc)[:300])
            item = None
        if item is None or me is None or item.lease_owner != me or item.epoch != step.epoch:
            if warm is not None:
                await warm.prefetch.close()
            return item is not None and me is not None and item.lease_owner == me
        if warm is None or warm.prefetch.ws is None:
            return True
        assert raw is not None and item.lease_expires_at_ms is not None
        lease = Lease(item.conn_id, me, item.epoch, item.lease_expires_at_ms, item.ws_url,
                      item.last_seq, item.error_count, unowned_ms=0, weight=weight_of(raw),
                      moved_at_ms=int_attr(raw, ATTR.moved_at_ms))
        self.start(lease, await warm.prefetch.take())
        return False

    async def _look_for_take(self, conn_id: str, warm: _Warm) -> None:
        """TAKE is late: what the table says decides (see the module)."""
        try:
            raw = await on_io_threads(self.store.get_raw, conn_id)
            item = LeaseItem.from_ddb(raw) if raw is not None else None
        except (HoldfastError, MalformedItem) as exc:
            logger.debug("handoff: cannot look for a late take", conn_id=conn_id,
                         error=str(exc)[:300])
            return  # looked for again in TAKE_CHECK_MS
        me = self.owner()
        if self.warming.get(conn_id) is not warm or me is None:
            return  # taken, aborted or timed out meanwhile
        if item is not None and item.started and item.lease_owner == warm.holder and (
                item.epoch == warm.epoch):
            return  # still the holder's: its TAKE may yet come
        if item is not None and item.lease_owner == me and item.epoch > warm.epoch:
            logger.info("handoff: taking over without its take message", conn_id=conn_id,
                        holder=warm.holder, epoch=item.epoch)
            await self._take(HandoffStep(TAKE, conn_id, item.epoch, item.last_seq,
                                         warm.holder))
            return
        del self.warming[conn_id]
        await warm.prefetch.close()
        if item is not None and item.started and item.lease_owner is None:
            logger.info("handoff: the holder let go without a take (it died and was reaped, "
                        "or released it); claiming it", conn_id=conn_id, holder=warm.holder)
            await self.claim(conn_id)

    # -- housekeeping ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Time out offers and warm-ups, until cancelled (then close every warm-up)."""
        try:
            while True:
                await asyncio.sleep(_TICK_S)
                now = self.mono()
                for conn_id in [c for c, o in self.offers.items() if o.deadline_ms <= now]:
                    offer = self.offers[conn_id]
                    self._send(offer.successor, HandoffStep(ABORT, conn_id, offer.epoch, None,
                                                            self.owner() or ""))
                    self._fall_through(conn_id, "no ready in time")
                for conn_id in [c for c, w in self.warming.items() if w.deadline_ms <= now]:
                    self._spawn(self.warming.pop(conn_id).prefetch.close())
                for conn_id, warm in self.warming.items():
                    if warm.check_ms <= now:
                        warm.check_ms = now + TAKE_CHECK_MS  # the next look, if still due
                        self._spawn(self._look_for_take(conn_id, warm))
        finally:
            await self.close_warm_ups()

    async def close_warm_ups(self) -> None:
        """Close every warm-up: the worker stops, or its session is lost (each warm-up was
        for that session's owner; left open, a paused worker's socket outlived its SIGCONT by
        seconds, waiting for a TAKE addressed to the old owner)."""
        warming, self.warming = list(self.warming.values()), {}
        for warm in warming:
            with contextlib.suppress(Exception):
                await warm.prefetch.close()

    def _send(self, peer: str, step: HandoffStep) -> None:
        # Each side times out on its own: a lost message costs a fallback, not a stream.
        self.outbox.post(peer, Letter(step.body(peer)))

    def released(self, conn_id: str, successor: str) -> None:
        """A release named ``successor`` (break-before-make): nudge it straight away, one
        SQS message, rather than a stream record and the router later (whose nudge follows
        and finds the stream claimed)."""
        self.outbox.post(successor, Nudge(conn_id, REASON_HANDOFF, to=successor))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
