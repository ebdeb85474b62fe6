"""The successor's side of a make-before-break handoff (the holder's: ``worker.handoff``;
the protocol: ``holdfast.core.handoff``).

WARM is checked (room, the item still names the holder at that epoch, the stream allows two
connections), then a ``Prefetch`` opens the upstream from the holder's position and READY goes
back. RESERVE (a stream that allows one connection at a time) is checked the same way and
answered READY at once: a slot is kept, and the stream connects when it starts on TAKE.
TAKE from the holder we warmed up for, past that epoch: the stream starts on the warm
socket at once, its lease made of the warm-up's read and TAKE (the holder sends TAKE only after
its write landed). Any other TAKE: the item is read back first (it must name us at TAKE's
epoch); one without a warm-up (dropped meanwhile) is claimed as our own stray.

Right after READY the successor also looks for the transfer in the table, every
``TAKE_LOOK_EVERY_MS`` for ``TAKE_LOOK_FOR_MS`` (a read is faster than the TAKE message on a
loaded machine); then, a TAKE late by ``TAKE_CHECK_MS`` after READY is looked for once per
``TAKE_CHECK_MS``. Both are windows of one look loop (``worker.looks``): one read for every
warm-up due (``holdfast.core.batch_reads``), one judgement (``worker.warmlooks``: ``judge``,
and ``last_look`` for a dropped warm-up; this module keeps the warm-ups, the loop, the
windows and the deadlines). What a look finds:
the item names us past that epoch (the transfer landed; TAKE is on its way, was lost, or the
holder died right after writing it): taken as if TAKE had come (TAKE, when it comes, finds the
stream started at its epoch and is dropped); nobody (the holder died before its transfer and
was reaped): the warm-up is dropped and the stream claimed, an ordinary failover instead of
one that waits for ``TAKE_TIMEOUT_MS`` (a nudge for a stream we warm up for is refused
meanwhile); another owner, or no item: dropped. A warm-up never taken over is closed after
``TAKE_TIMEOUT_MS``. A warm-up dropped (that, or ABORT) has one last look, in the look loop's
next read: a stream its holder let go to nobody meanwhile is claimed (its nudge came while we
warmed up, and was refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from holdfast.core.batch_reads import read_raw_many
from holdfast.core.exceptions import HoldfastError, MalformedItem
from holdfast.core.handoff import (
    ABORT,
    READY,
    RESERVE,
    TAKE_CHECK_MS,
    TAKE_LOOK_EVERY_MS,
    TAKE_LOOK_FIRST_MS,
    TAKE_LOOK_FOR_MS,
    TAKE_TIMEOUT_MS,
    WARM_TIMEOUT_MS,
    HandoffStep,
    take_says_the_transfer,
)
from holdfast.core.model import Lease, one_connection_only
from holdfast.core.transfer import transferred
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.looks import Looks
from holdfast.worker.prefetch import Prefetch, Prefetched
from holdfast.worker.warmlooks import judge, last_look
from holdfast.worker.warmup import WarmUp

if TYPE_CHECKING:
    from holdfast.core.store import LeaseStore
    from holdfast.worker.connection import Connection
    from holdfast.worker.context import ConnectionContext

__all__ = ["WarmUps"]

logger = Logger(service=WORKER_LOGGER, child=True)


class WarmUps:
    """The streams a handoff is bringing to this worker (see the module)."""

    def __init__(self, *, store: LeaseStore, streams: dict[str, Connection],
                 ctx: ConnectionContext, owner: Callable[[], str | None],
                 room: Callable[[], int], start: Callable[[Lease, Prefetched | None], None],
                 claim: Callable[[str], Awaitable[object]], mono: Callable[[], int],
                 send: Callable[[str, HandoffStep], None],
                 spawn: Callable[[Awaitable[None]], None], single_connection: bool,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.store, self.streams, self.ctx = store, streams, ctx
        self.single_connection = single_connection  # the fleet default
        self.owner, self.room, self.start, self.claim = owner, room, start, claim
        self.mono, self._send, self._spawn, self.sleep = mono, send, spawn, sleep
        self.warming: dict[str, WarmUp] = {}
        # An offer being checked (its item read): counted as incoming from its room check on,
        # or offers arriving together (one bundle, holders stopping at once) all fit one slot.
        self._checking: set[str] = set()
        self._taking: set[str] = set()  # TAKE received, the item being read back
        self.looks = Looks[WarmUp](
            read=lambda ids: on_io_threads(read_raw_many, self.store, ids),
            current=self.warming.get, found=functools.partial(judge, self),
            last_found=functools.partial(last_look, self),
            mono=mono, spawn=spawn, sleep=sleep, every_ms=TAKE_LOOK_EVERY_MS)

    async def warm_up(self, step: HandoffStep) -> None:
        """WARM: check, connect, answer READY (or ABORT); RESERVE: check, answer READY."""
        me = self.owner()
        if (me is None or step.conn_id in self.streams or step.conn_id in self.incoming()
                or self.room() <= 0):
            self._send(step.peer, HandoffStep(ABORT, step.conn_id, step.epoch, None, me or ""))
            return
        self._checking.add(step.conn_id)
        try:
            await self._warm_up(step, me)
        finally:
            self._checking.discard(step.conn_id)  # in warming by now, or refused

    async def _warm_up(self, step: HandoffStep, me: str) -> None:
        prefetch: Prefetch | None = None
        warm: WarmUp | None = None
        try:
            stored = await on_io_threads(self.store.read, step.conn_id)
            if self.owner() != me:
                # Our session was lost (its warm-ups closed) while we read: READY with the
                # old owner would have the holder pass the lease to it.
                raise HoldfastError("our session changed while the item was read")
            item = stored.item if stored is not None else None
            single = one_connection_only(stored.single_connection if stored else None,
                                         self.single_connection)
            if (stored is None or item is None or not item.started
                    or item.lease_owner != step.peer or item.epoch != step.epoch
                    or (single and step.kind != RESERVE)):
                raise HoldfastError("the item does not name the holder at that epoch, or "
                                    "allows one connection at a time")
            if step.kind != RESERVE:
                prefetch = Prefetch.for_stream(step.conn_id, item.ws_url, step.seq, self.ctx)
            deadline = self.mono() + TAKE_TIMEOUT_MS
            warm = WarmUp(prefetch, step.peer, step.epoch, deadline, stored, me,
                          check_ms=deadline)
            self.warming[step.conn_id] = warm
            if prefetch is not None:
                await prefetch.open(WARM_TIMEOUT_MS / 1000)
        except Exception as exc:  # whatever it was, it costs a fallback, never the worker
            if prefetch is not None:
                await prefetch.close()
            if warm is not None and self.warming.get(step.conn_id) is not warm:
                return  # dropped while it connected (ABORT, its deadline, a lost session)
            self.warming.pop(step.conn_id, None)
            logger.info("handoff: cannot warm up", conn_id=step.conn_id, holder=step.peer,
                        error=f"{type(exc).__name__}: {exc}"[:300])
            self._send(step.peer, HandoffStep(ABORT, step.conn_id, step.epoch, None, me))
            return
        if self.warming.get(step.conn_id) is not warm:
            # Dropped while it connected (ABORT, its deadline, a lost session), or replaced
            # by a new offer's warm-up: whoever dropped it closed it before the socket was
            # open, so the socket is closed here, or it stayed open for the process's life.
            if prefetch is not None:
                await prefetch.close()
            return
        if warm is not None:
            logger.info("handoff: warmed up" if prefetch is not None else
                        "handoff: slot reserved", conn_id=step.conn_id, holder=step.peer,
                        from_seq=step.seq)
            warm.check_ms = self.mono() + TAKE_CHECK_MS
            self._send(step.peer, HandoffStep(READY, step.conn_id, step.epoch, None, me))
            begin = self.mono() + TAKE_LOOK_FIRST_MS
            self.looks.window(step.conn_id, warm, begin, begin + TAKE_LOOK_FOR_MS)

    def incoming(self) -> set[str]:
        """Streams on their way to us by a handoff (warming up, or being taken over): not
        strays, whatever the owner index says, and not to be claimed meanwhile."""
        return self.warming.keys() | self._checking | self._taking

    async def take(self, step: HandoffStep) -> None:
        """TAKE: start the stream on its warm socket (see the module). One take of a stream at
        a time: a TAKE that comes while the table's look for it is taking the stream (or the
        other way round) is dropped; two would start two deliverers (measured: a TAKE late by
        0.8 s raced the look and the second claimed the stream again, 358 seqs twice)."""
        if step.conn_id in self._taking:
            return
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
        held = self.streams.get(step.conn_id)
        if warm is None and held is not None and held.held.lease.epoch == step.epoch:
            return False  # the look in the table started it at this epoch: nothing to read
        if (warm is not None and me is not None and warm.usable and warm.owner == me
                and step.peer == warm.holder and step.at is not None
                and take_says_the_transfer(
                    step, holder_epoch=warm.epoch, checkpoint=warm.stored.item.last_seq,
                    now_ms=self.store.clock(), lease_ms=self.store.lease_ms,
                    skew_ms=self.store.skew_ms)):
            # The holder we warmed up for wrote the transfer: no read in the gap; the lease is
            # what that transfer wrote (``transferred``: the holder's own rule) over the
            # warm-up's read of the holder's lease, at TAKE's time and checkpoint. Not unowned
            # for a moment.
            lease = replace(transferred(
                replace(warm.stored.lease(warm.holder), epoch=warm.epoch), step.seq, me,
                step.at, self.store.lease_ms), unowned_ms=0)
            self.start(lease, await warm.taken())
            return False
        try:
            stored = await on_io_threads(self.store.read, step.conn_id)
        except (HoldfastError, MalformedItem) as exc:
            logger.warning("handoff: cannot read the stream taken over; the strays pass "
                           "takes it back", conn_id=step.conn_id, error=str(exc)[:300])
            stored = None
        item = stored.item if stored is not None else None
        if (item is None or me is None or item.lease_owner != me or item.epoch != step.epoch
                or not item.started):
            if warm is not None:
                await warm.close()
            # Ours (at another epoch, or stopped since the transfer): the claim takes it
            # back, or releases a stopped one; never started from here.
            return item is not None and me is not None and item.lease_owner == me
        if warm is None or not warm.usable:
            return True
        assert stored is not None and item.lease_expires_at_ms is not None
        self.start(stored.lease(me, unowned_ms=0), await warm.taken())
        return False

    async def _dropped(self, conn_id: str, warm: WarmUp) -> None:
        """A warm-up dropped (ABORT, or past its deadline): closed, and one last look."""
        await warm.close()
        self.looks.last(conn_id, warm.holder)

    def abort(self, conn_id: str) -> None:
        """ABORT from the holder: drop the warm-up."""
        warm = self.warming.pop(conn_id, None)
        if warm is not None:
            self._spawn(self._dropped(conn_id, warm))

    def tick(self, now: int) -> None:
        """Close the warm-ups past their deadline; look for the TAKEs that are late."""
        for conn_id in [c for c, w in self.warming.items() if w.deadline_ms <= now]:
            self._spawn(self._dropped(conn_id, self.warming.pop(conn_id)))
        for conn_id, warm in self.warming.items():
            if warm.check_ms <= now and not self.looks.pending(conn_id):
                warm.check_ms = now + TAKE_CHECK_MS  # the next look, if still due
                self.looks.window(conn_id, warm, now, now)

    async def close_all(self) -> None:
        """Close every warm-up: the worker stops, or its session is lost (each warm-up was
        for that session's owner; left open, a paused worker's socket outlived its SIGCONT by
        seconds, waiting for a TAKE addressed to the old owner)."""
        warming = list(self.warming.values())
        self.warming.clear()
        # Every socket dropped at once, before any await: a closing handshake each, one after
        # the other on a loop just resumed, kept a paused worker's last socket open 2 s past
        # its SIGCONT while the stream's new holder delivered (the soak's overlap judge).
        for warm in warming:
            warm.abort()
        for warm in warming:
            with contextlib.suppress(Exception):
                await warm.close()
