"""How a held stream ends: the one writer of a holding's last write (``docs/concepts/protocol.md``).

``Holdings`` runs each stream; when its connection returns, ``Endings.finish`` decides what to
write, from how it ended:

- lost (taken over, deleted, our session gone): nothing to write, it is not ours;
- fenced: one best-effort release (it may still be ours, or already someone else's);
- given up after upstream failures, or parked by a handler failing on one message (the
  handler contract, ``worker.handler``): released in BACKOFF with the error and a retry time;
- handed over (make-before-break, ``worker.handoff``): one transfer to the warm successor
  (``pass_on``), written with the socket still open, or once it is closed for a stream that
  allows one connection at a time;
- anything else (drained, aborted at the shutdown deadline, cancelled): released with its
  final checkpoint and ``lease_expires_at_ms = 0``, naming the successor the decider chose
  for a move or a stop, so the router hands it on at once.

A stream our session owns but no connection of ours holds (STOPPED, a stray we will not hold)
is released by ``let_go``: only its holder may free it, and that is us.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Awaitable, Callable

from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.core.batch import RenewMode
from holdfast.core.batch_endings import ReleaseRequest, ReleaseResult, release_many
from holdfast.core.exceptions import HoldfastError, LossReason, StoreUnavailable
from holdfast.core.model import Lease, LeaseItem, one_connection_only
from holdfast.core.store import LeaseStore
from holdfast.worker.backoff import Backoff, errors_before, unanswered_write_retry_s
from holdfast.worker.balancing import HANDOFF, SHED, Balancing
from holdfast.worker.connection import Connection
from holdfast.worker.gathered import Gathered
from holdfast.worker.held import SHUTDOWN, SHUTDOWN_TIMEOUT, HeldState, HeldStream
from holdfast.worker.iothreads import logs_failure, on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.takeback import GiveUp

__all__ = ["Endings"]

logger = Logger(service=WORKER_LOGGER, child=True)


class Endings:
    """The last write of each held stream (see the module). ``single_connection``: the fleet
    default for a stream whose item does not say."""

    def __init__(self, store: LeaseStore, balancing: Balancing, backoff: Backoff, *,
                 single_connection: bool, metrics: WorkerMetrics, counts: Counter[str],
                 wall: Callable[[], int], mono: Callable[[], int],
                 release_mode: RenewMode = "batch") -> None:
        self.store, self.balancing, self.backoff = store, balancing, backoff
        # Plain releases, gathered into batch calls when many end together (a stop).
        self.releases: Gathered[ReleaseRequest, ReleaseResult] = Gathered(
            functools.partial(release_many, store),
            lambda q, error: ReleaseResult(q.lease.conn_id, error=error), mode=release_mode)
        self.single_connection = single_connection
        self.metrics, self.counts = metrics, counts
        self.wall, self.mono = wall, mono
        # Make-before-break (set by the supervisor, ``worker.handoff``): pass a stream whose
        # successor is warm.
        self.transfer: Callable[[Connection], Awaitable[str]] | None = None
        # A release named its successor: tell it at once (``Handoffs.released``).
        self.named_release: Callable[[str, str], None] | None = None
        # A release found the item written over: take it back for its checkpoint
        # (``TakeBack.give_back_soon``).
        self.give_back: Callable[[Connection, str, GiveUp | None], None] | None = None
        # A release got no answer: remembered, should the router order it taken back
        # (``TakeBack.unreleased``).
        self.unreleased: Callable[[Connection, GiveUp | None], None] | None = None
        # Ended (aborted at the stop's deadline) while their transfer was in flight: finished
        # when it fails, which leaves them ours (``_passed``); the tasks that do it.
        self._after_transfer: set[Connection] = set()
        self._late: set[asyncio.Task[None]] = set()

    async def finish(self, conn: Connection, error: str | None) -> None:
        """Write what ``conn``'s end calls for (``error``: why its connection gave up)."""
        held = conn.held
        if held.state is HeldState.LOST:
            self.counts["lost"] += 1
            return  # not ours any more: nothing to write
        if held.state is HeldState.FENCED:
            self.counts["fenced"] += 1
            await self._release(conn, attempts=1)  # best effort: it may be ours still
            return
        if error is not None and not held.stopping:
            give_up, retry_s = self._give_up(held, error)
            await self._release(conn, give_up=give_up)
            conn.log("warning", "stream handed back after errors", error=error,
                     retry_in_s=round(retry_s, 1))
            return
        # Make-before-break, the successor is warm: passed on already before the close, or
        # now (it stopped between two connections).
        await self.pass_on(conn)
        if conn.passed == "passing":  # aborted, its transfer in flight: finished if it fails
            self._after_transfer.add(conn)
            return
        if conn.passed is not None and conn.passed != "failed":
            return  # counted when its transfer ended
        moved = held.stop_reason in (SHED, HANDOFF)  # a move: starts its cool-down
        # A move or a stop of ours is handed to the successor the decider named, if any
        # ("": decided already, nobody).
        successor = conn.handoff_to if conn.handoff_to is not None else (
            self.balancing.successor() if moved or held.stop_reason in (
                SHUTDOWN, SHUTDOWN_TIMEOUT) else None)
        successor = successor or None
        outcome = await self._release(conn, moved=moved, successor=successor)
        self.counts["released" if outcome == "released" else f"release_{outcome}"] += 1
        if successor is not None and outcome == "released":
            self.metrics.incr(names.METRIC_STREAMS_HANDED_OFF)
            if self.named_release is not None:
                self.named_release(conn.conn_id, successor)
        if moved and outcome == "released":
            self.counts["shed"] += 1
            self.balancing.moved(conn.conn_id)

    async def pass_on(self, conn: Connection, *, socket_open: bool = False) -> None:
        """A drained stream: a handoff passes the lease now; a warm one with the socket still
        open (no reconnect in the gap), one connection at a time only once it is closed
        (the successor connects on TAKE)."""
        if socket_open and one_connection_only(conn.held.lease.single_connection,
                                               self.single_connection):
            return
        if (conn.held.stop_reason == HANDOFF and conn.handoff_to and conn.passed is None
                and self.transfer is not None):
            # Shielded: once the write is sent, the successor must hear of it (TAKE) even if
            # this stream is aborted meanwhile, or it waits for a TAKE that never comes. Once
            # only: the finish after an abort finds it "passing" and leaves it be.
            conn.passed = "passing"
            passing = asyncio.ensure_future(self.transfer(conn))
            passing.add_done_callback(functools.partial(self._passed, conn))
            await asyncio.shield(passing)
            if conn.passed == "transferred":
                conn.held.close()  # not ours: no checkpoint of it from here on

    def _passed(self, conn: Connection, passing: asyncio.Future[str]) -> None:
        """The transfer's outcome on its stream ("failed" if it raised or was cancelled),
        counted here, once: an abort at the drain deadline can end the stream while its
        transfer is still in flight (counted "lost" then, though it landed)."""
        ok = not passing.cancelled() and passing.exception() is None
        conn.passed = passing.result() if ok else "failed"
        if conn.passed != "failed":  # failed: still ours, released and counted as such
            self.counts["handed_over" if conn.passed == "transferred" else "lost"] += 1
        if conn in self._after_transfer:
            self._after_transfer.discard(conn)
            if conn.passed == "failed":  # still ours, and its finish is over: released now
                task = asyncio.ensure_future(self.finish(conn, None))
                self._late.add(task)
                task.add_done_callback(self._late.discard)
                task.add_done_callback(logs_failure("releasing a stream its transfer failed"))

    def park_stuck(self, conn: Connection, error: str) -> None:
        """The give-up of a stream whose handler blocked the event loop past the fence, written
        synchronously from the watchdog's thread (the loop cannot run it; the process exits
        next): like any give-up, with ``error``, its back-off and the checkpoint before the
        stuck message. Its next holder resumes from that message only after the back-off.
        Counted as any give-up (the watchdog flushes the metrics before the exit)."""
        give_up, _ = self._give_up(conn.held, error)
        give_up.release(self.store, conn.held.lease, conn.held.checkpoint)

    def _give_up(self, held: HeldStream, error: str) -> tuple[GiveUp, float]:
        """A give-up's terms, counted: ``error``, the give-ups in a row before this one
        (``backoff.errors_before``: the release records one more) and the end of its back-off
        (wall ms); and that back-off's length (s). The one place for ``finish``'s and
        ``park_stuck``'s."""
        self.counts["gave_up"] += 1
        self.metrics.incr(names.METRIC_UPSTREAM_GIVE_UPS)
        before = errors_before(held.lease.error_count, held.cursor.handled)
        retry_s = self.backoff.retry_after_s(before + 1)
        return GiveUp(error, before, self.wall() + round(retry_s * 1000)), retry_s

    async def _release(self, conn: Connection, *, attempts: int = 20,
                       give_up: GiveUp | None = None, moved: bool = False,
                       successor: str | None = None) -> str:
        """Write the holding's release; as ``give_up`` if it is one (``_give_up``'s terms)."""
        held = conn.held
        for attempt in range(attempts):
            try:
                if give_up is None:
                    lost = await self._release_gathered(ReleaseRequest(
                        held.lease, held.checkpoint, moved=moved, successor=successor))
                else:  # a give-up: rare, alone
                    lost = await on_io_threads(give_up.release, self.store, held.lease,
                                               held.checkpoint)
            except StoreUnavailable as exc:
                if attempt + 1 < attempts and self.mono() < held.fence_mono_ms:
                    await asyncio.sleep(unanswered_write_retry_s(attempt))
                    continue
                conn.log("warning", "release failed: the lease will expire instead",
                         error=str(exc)[:300])
                if self.unreleased is not None:
                    self.unreleased(conn, give_up)
                return "failed"
            except HoldfastError as exc:
                conn.log("error", "release failed", error=str(exc)[:300])
                return "failed"
            if lost is not None:
                if lost is LossReason.OVERWRITTEN and self.give_back is not None:
                    self.give_back(conn, "release", give_up)
                return f"not_ours_{lost}"
            conn.log("info", "released", checkpoint=held.checkpoint, handled=held.cursor.handled,
                     successor=successor)
            return "released"
        return "failed"

    async def _release_gathered(self, request: ReleaseRequest) -> LossReason | None:
        """``LeaseStore.release`` of a plain release, through the gathered batch calls."""
        answer = await self.releases.write(request)
        if answer.error is not None:
            raise answer.error
        return answer.lost

    async def let_go(self, item: LeaseItem, owner: str) -> bool:
        """Release a stream our session owns but no connection of ours holds (STOPPED, or a
        stray we will not hold): only its holder may free it, and that is us."""
        lease = Lease(item.conn_id, owner, item.epoch, item.lease_expires_at_ms or 0,
                      item.ws_url, item.last_seq)
        try:
            lost = await self._release_gathered(ReleaseRequest(lease))
        except HoldfastError as exc:
            logger.warning("cannot release a stream we own but do not hold",
                           conn_id=item.conn_id, error=str(exc)[:300])
            return False
        if lost is not None:
            logger.info("a stream we owned but did not hold is not ours any more",
                        conn_id=item.conn_id, reason=str(lost))
            return False
        logger.info("released a stream we owned but did not hold", conn_id=item.conn_id,
                    desired_state=item.desired_state)
        return True
