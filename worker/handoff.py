"""Make-before-break handoffs: the holder's side, and the messages of both (the protocol:
``holdfast.core.handoff``).

**Holder.** ``offer(conn, successor, reason)`` replaces a drain when the decider named a
successor (a shed, a drain, a SIGTERM): the stream keeps delivering while WARM goes to the
successor's order queue. On READY the stream drains with the reason ``HANDOFF`` right after
its next frame with a seq (``STOP_AFTER_FRAME_WAIT_MS``: the transfer and TAKE then fit in the
gap to the frame after it; the successor skips seq-less frames only up to that seq's) and
``Endings`` (``worker.endings``) calls ``transfer``: one conditional write passes the lease
(``store.transfer``), then TAKE tells the successor. ABORT, or no READY within
``WARM_TIMEOUT_MS``, and the stream drains for its original reason and is released to whoever
has room (the successor refused, or is too slow to be trusted with the hold of a named
release).

**Successor.** ``worker.warmups``: WARM opens the upstream from the holder's position and
answers READY; TAKE starts the stream on the warm socket.

A stream that allows one connection at a time (``single_connection``) is offered with RESERVE:
the successor connects only on TAKE, and ``Endings`` writes the transfer once the socket is
closed. Not possible (no order queues, a stream without a position yet): ``offer`` says False
and the caller drains and releases naming the successor (break-before-make, ``store.release``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.core.bundles import Letter
from holdfast.core.exceptions import HoldfastError, LeaseLost, LossReason
from holdfast.core.handoff import (
    ABORT,
    READY,
    RESERVE,
    STOP_AFTER_FRAME_WAIT_MS,
    TAKE,
    WARM,
    WARM_TIMEOUT_MS,
    HandoffStep,
)
from holdfast.core.model import Lease, one_connection_only
from holdfast.core.nudge import REASON_HANDOFF, Nudge
from holdfast.worker.balancing import HANDOFF, SHED
from holdfast.worker.held import SHUTDOWN
from holdfast.worker.iothreads import logs_failure, on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.prefetch import Prefetched
from holdfast.worker.warmpace import warm_pace
from holdfast.worker.warmups import WarmUps

if TYPE_CHECKING:
    from holdfast.core.store import LeaseStore
    from holdfast.worker.connection import Connection
    from holdfast.worker.context import ConnectionContext
    from holdfast.worker.outbox import Outbox

__all__ = ["Handoffs"]

logger = Logger(service=WORKER_LOGGER, child=True)
_TICK_S = 0.2
_AWAIT_S = 0.05  # how often a stop waiting for successors looks again


@dataclass
class _Offer:
    successor: str
    epoch: int
    reason: str  # the drain reason if it falls through (shed, shutdown)
    deadline_ms: int


class Handoffs:
    """This worker's handoffs: the holder's side, the successor's (``warm_ups``), the
    messages and their timeouts (see the module)."""

    def __init__(self, *, outbox: Outbox, store: LeaseStore,
                 streams: dict[str, Connection], ctx: ConnectionContext,
                 owner: Callable[[], str | None], room: Callable[[], int],
                 start: Callable[[Lease, Prefetched | None], None],
                 claim: Callable[[str], Awaitable[object]],
                 mono: Callable[[], int], single_connection: bool,
                 withdraws: Callable[[str, str], bool] = lambda _conn, _to: False,
                 give_back: Callable[[Connection, str], None] | None = None) -> None:
        self.outbox = outbox
        self.store, self.streams, self.ctx = store, streams, ctx
        self.owner, self.room, self.start, self.claim = owner, room, start, claim
        self.mono, self.single_connection = mono, single_connection
        self.withdraws = withdraws  # a shed whose successor the decider dropped (at READY)
        self.give_back = give_back  # a transfer found the item written over (worker.takeback)
        self.offers: dict[str, _Offer] = {}
        # Whom a stop hands a stream to (its pinned successors; None: not stopping).
        self.stop_successor: Callable[[], str | None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.warm_ups = WarmUps(store=store, streams=streams, ctx=ctx, owner=owner, room=room,
                                start=start, claim=claim, mono=mono, send=self._send,
                                spawn=self._spawn, single_connection=single_connection)

    # -- holder ---------------------------------------------------------------------------
    def offer(self, conn: Connection, successor: str, reason: str) -> bool:
        """Start handing ``conn`` to ``successor`` make-before-break; False if it cannot be."""
        me, lease = self.owner(), conn.held.lease
        single = one_connection_only(lease.single_connection, self.single_connection)
        from_seq = conn.held.cursor.next_seq
        if (me is None or from_seq is None or successor == me
                or conn.conn_id in self.offers or not conn.held.live or conn.held.stopping):
            return False
        self.offers[conn.conn_id] = _Offer(successor, lease.epoch, reason,
                                           self.mono() + WARM_TIMEOUT_MS)
        self._send(successor, HandoffStep(RESERVE if single else WARM, conn.conn_id,
                                          lease.epoch, from_seq, me))
        conn.log("info", "handing over (reserving a slot at the successor)" if single else
                 "handing over (warming up the successor)", successor=successor,
                 from_seq=from_seq, why=reason)
        return True

    async def offer_at_stop(self, conns: list[Connection], successor: Callable[[], str | None],
                            *, until_ms: int, at_once: int,
                            awaiting: Callable[[], bool] = lambda: False) -> list[Connection]:
        """A stop: offer ``conns`` warm to the successors the decider named, ``at_once`` in
        flight (more if the pace needs them, ``warmpace.warm_pace``), the next as one ends,
        until ``until_ms`` (monotonic). A stream that cannot go
        warm is drained for its named successor at once, and so is the queue's tail that the
        offers will not reach at their pace (``warmpace.warm_pace``). None named while
        ``awaiting`` (the decider's answer to our drain mark, ``worker.successors``): the
        offers wait for it. Returns those not reached (the caller drains them): each waits
        delivering, so waiting is no gap."""
        self.stop_successor = successor
        left = list(reversed(conns))
        t0 = last = self.mono()
        started = slot_ms = 0
        while left and self.mono() < until_ms:
            now = self.mono()
            # The pace counts the slots in use: a wait for successors is no offer's time.
            slot_ms, last = slot_ms + (now - last) * min(at_once, len(self.offers)), now
            wider, beyond = warm_pace(now - t0, len(left), started, slot_ms, until_ms - now,
                                      at_once=at_once)
            if wider > at_once:
                logger.info("stop: more warm handoffs at once, to reach the queue in time",
                            at_once=wider, waiting=len(left))
                at_once = wider
            # The tail the offers will not reach in time is drained now, not at the phase's end.
            for _ in range(beyond):
                tail = left.pop(0)
                if not (tail.ended or tail.held.stopping or tail.conn_id in self.offers):
                    tail.drain_to(successor(), SHUTDOWN)
            if not left:
                break
            if len(self.offers) >= at_once:
                await asyncio.sleep(0.02)
                continue
            conn = left.pop()
            if conn.ended or conn.held.stopping or conn.conn_id in self.offers:
                continue  # gone, stopping, or already being handed over (a shed)
            named = successor()
            if named is None:
                left.append(conn)
                if not awaiting():
                    break
                if not started:  # the pace begins with the first offer
                    t0, slot_ms = self.mono(), 0
                await asyncio.sleep(_AWAIT_S)
                continue
            if self.offer(conn, named, SHUTDOWN):
                started += 1
            else:
                conn.drain_to(named, SHUTDOWN)
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
            self._send(successor, HandoffStep(ABORT, conn.conn_id, held.lease.epoch, None, me))
            if lost.reason is LossReason.OVERWRITTEN and self.give_back is not None:
                # An app's PutItem of the whole item removed our holding and checkpoint:
                # taken back and released with that checkpoint (``worker.takeback``), or its
                # next holder would start at the upstream's head.
                self.give_back(conn, "handoff")
            if lost.reason in (LossReason.STOPPED, LossReason.REGRESSION):
                # Still ours: stopped by its operator meanwhile (a transfer needs STARTED), or
                # its stored checkpoint moved past ours by someone else (the release keeps
                # theirs, ``LeaseStore.release``). Released, to nobody; "lost" wrote nothing
                # and left it owned by us and held by nobody until our strays pass.
                conn.log("info", "handoff: the stream is still ours but cannot be passed on; "
                         "releasing it", reason=lost.reason)
                conn.handoff_to = ""
                return "failed"
            conn.log("warning", "handoff: the stream was not ours any more", reason=lost.reason)
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
        """The warm-up failed: drain for the original reason and release. Not to the
        successor: it refused, or did not answer in time and was told to drop its warm-up, so
        naming it could cost the stream the whole hold. A stop names the next of its
        successors instead (in a deploy, released to whoever has room, another old worker
        about to stop could take it and move it again); a shed, and a stop with no other
        successor left, releases to whoever has room."""
        offer = self.offers.pop(conn_id, None)
        conn = self.streams.get(conn_id)
        if offer is None or conn is None or not conn.held.live or conn.held.stopping:
            return
        other = self.stop_successor() if self.stop_successor is not None else None
        if other == offer.successor:
            other = None
        conn.log("info", "handoff not warm, releasing instead", why=why,
                 successor=offer.successor, released_to=other)
        conn.drain_to(other, offer.reason)

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
                if (withdrawn and conn is not None and conn.held.live and not conn.held.stopping
                        and self.stop_successor is not None):
                    # Kept, but we are stopping, and the stop passed this stream by as being
                    # offered: it goes the stop's way now, not at the drain deadline.
                    conn.drain_to(self.stop_successor(), SHUTDOWN)
                return
            conn.handoff_to = step.peer
            conn.drain_after_frame(HANDOFF, STOP_AFTER_FRAME_WAIT_MS / 1000)
        elif step.kind == ABORT:
            if step.conn_id in self.offers:
                self._fall_through(step.conn_id, "the successor refused")
            self.warm_ups.abort(step.conn_id)
        elif step.kind in (WARM, RESERVE):
            self._spawn(self.warm_ups.warm_up(step))
        elif step.kind == TAKE:
            self._spawn(self.warm_ups.take(step))

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
                self.warm_ups.tick(now)
        finally:
            await self.warm_ups.close_all()

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
        # Nobody awaits it: a failure is logged now, not as "exception never retrieved" at GC.
        task.add_done_callback(logs_failure("a handoff step"))
