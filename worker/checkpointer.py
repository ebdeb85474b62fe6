"""Checkpoints and self-fencing for the streams a worker holds.

The worker's session keeps its streams alive (``worker.session``); a stream's own expiry is a
far backstop (``BACKSTOP_MS``). Once every ``checkpoint_ms`` this writes the checkpoint of each
held stream whose seq moved (one ``renew_many`` per tick: batched PartiQL, or single UpdateItems
on moto, which ignores PartiQL conditions), and a stream's backstop once half of it is gone
(about twice an hour).

The period is cut into slices (``rules.checkpoint_slices``: a tenth every 2 s at the default
20 s; one slice under 4 s) and each tick writes one slice, a stream's slice fixed by a hash of
its id (``rules.checkpoint_slice``). Writing every stream at once was a burst every period: at
5,000 streams 200 batch calls, 6-9 s on DynamoDB Local with the session heartbeat (a write to the
same server) queued behind them, and on AWS a spike of write capacity every 20 s that throttles a
provisioned table. Outcomes per stream:

- written: the checkpoint is stored; a refreshed backstop also moves the stream's own fence;
- LOST, DELETED, INVALID: stop it at once (another worker may already hold it);
- REGRESSION (still ours: someone moved the stored checkpoint past ours; not when the stored
  one is not past what we handled: our own take-back wrote it): stop it at once (the
  seqs in between are theirs to skip) and release it, keeping their checkpoint
  (``LeaseStore.release``), so the next holder resumes from it now, not after our strays pass;
- OVERWRITTEN (no owner, our epoch gone: an app's PutItem of the whole item): take it back
  with our owner, epoch and checkpoint (``worker.takeback``) and go on (drained and released
  if the write set STOPPED); stopped if that is refused; given back (taken back only to be
  released with its checkpoint) if it was stopping already;
- STOPPED: drain it (finish the handler call, close) and release with the final checkpoint;
- StoreUnavailable: keep it; the next round writes the checkpoint again.

While the table throttles (``holdfast.core.aws.recently_throttled``) a round puts off the
streams whose backstop is not due: a checkpoint is a resume point that can wait a period, and
its writes would add to the calls of a table already refusing them (the heartbeat's retries
come first). Never twice in a row: a table throttled now and then for hours must not stop a
stream's checkpoints, so its replay window is at most two periods.

A never-checkpointed stream's first seq (its anchor) is written before its first handler call
(``anchor``); the anchors asked for while one write is in flight go together in the next one,
so a burst of new streams costs a few batch calls, not one write each on two threads (300
streams started at once waited up to 4 s for their first message). A new stream connected
before its claim has its anchor written by the claim itself (``worker.prestart``).

The fence watcher aborts every stream past its deadline: its session's fence, or its own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger

from holdfast.core import names, rules
from holdfast.core.aws import recently_throttled
from holdfast.core.batch import RenewMode, RenewRequest, renew_many
from holdfast.core.exceptions import HoldfastError, LeaseLost, LossReason
from holdfast.core.model import Lease
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.worker.balancing import HANDOFF
from holdfast.worker.connection import Connection
from holdfast.worker.held import REGRESSED, STOPPED, monotonic_ms
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.takeback import TakeBack, ours_to_take

__all__ = ["Checkpointer"]

logger = Logger(service=WORKER_LOGGER, child=True)


@dataclass
class Checkpointer:
    """Writes the checkpoints of ``streams`` and fences the streams past their deadline."""

    store: LeaseStore  # its lease_ms, the backstop it writes (``BACKSTOP_MS``), is our length
    streams: dict[str, Connection]
    timing: rules.LeaseTiming
    metrics: WorkerMetrics
    mode: RenewMode = "batch"
    mono: Callable[[], int] = monotonic_ms
    checkpoint_ms: int = 20_000
    wall: Callable[[], int] = wall_clock_ms
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    throttled: Callable[[], bool] = recently_throttled
    # Threads of their own: a burst of claims or releases queued on the default executor must
    # not delay the writes (a stream whose backstop is due needs its write in time).
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=2, thread_name_prefix="holdfast-checkpoint"))
    # The batch calls of one round run side by side (boto3 clients are thread-safe), so
    # thousands of streams are written in a few round-trip times, not one per 25 streams.
    chunk_pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=4, thread_name_prefix="holdfast-checkpoint-chunk"))
    _anchors: list[tuple[Connection, int, asyncio.Future[bool]]] = field(default_factory=list)
    _put_off: set[str] = field(default_factory=set)  # streams the last throttled round put off
    _anchoring: asyncio.Task[None] | None = None
    takeback: TakeBack = field(init=False)  # a stream an app wrote over (``worker.takeback``)

    def __post_init__(self) -> None:
        self.takeback = TakeBack(self)

    async def run(self) -> None:
        """Write one slice of the checkpoints every ``checkpoint_ms / slices`` until cancelled:
        each stream once per ``checkpoint_ms`` (a stream that joins waits at most a period)."""
        slices = rules.checkpoint_slices(self.checkpoint_ms)
        tick_s = self.checkpoint_ms / slices / 1000
        tick = 0
        while True:
            started = self.mono()
            await self.write_slice(tick % slices, slices)
            tick += 1
            # A slow write delays the next tick, never skips it: a skipped slice would leave
            # its streams unwritten for two periods.
            elapsed_s = (self.mono() - started) / 1000
            await self.sleep(max(0.0, tick_s - elapsed_s))

    def _backstop_due(self, lease: Lease) -> bool:
        """Refresh a stream's backstop expiry once half of it is gone.

        Spreading does not make this late: a stream is looked at once per ``checkpoint_ms``
        (in its slice), as before, so the refresh comes at most a period (20 s by default) after
        it is due, with about ``BACKSTOP_MS / 2`` (30 min) minus that period left before the
        stream's own fence (``fence_after``)."""
        return lease.expires_at_ms - self.wall() < self.store.lease_ms // 2

    def fence_after(self, sent: int) -> int:
        """The own fence deadline of a stream whose backstop was written at ``sent`` (mono)."""
        # The length the store wrote (its one definition): a store of a shorter backstop
        # (tests) got a fence an hour out.
        return rules.fence_deadline_mono_ms(sent, self.timing, length_ms=self.store.lease_ms)

    async def write(self) -> None:
        """Write every held stream's checkpoint once (batched) and act on each outcome."""
        await self.write_slice(0, 1)

    async def write_slice(self, index: int, slices: int) -> None:
        """Write the checkpoints of the held streams in slice ``index`` of ``slices``."""
        # Draining streams too: their checkpoint moves until the release writes the last one.
        # Not one being handed over warm: its transfer writes the last one, and a checkpoint
        # landing after it could only find the lease passed on.
        held = [c for c in self.streams.values() if c.held.live
                and c.held.stop_reason != HANDOFF and (
            slices == 1 or rules.checkpoint_slice(c.held.lease.conn_id, slices) == index)]
        if not held:
            return
        requests = [RenewRequest(c.held.lease, c.held.checkpoint,
                                 extend=self._backstop_due(c.held.lease)) for c in held]
        held, requests = self._put_off_while_throttled(held, requests)
        if held:
            await self._renew(held, requests, "checkpoint")

    def _put_off_while_throttled(self, held: list[Connection], requests: list[RenewRequest]
                                 ) -> tuple[list[Connection], list[RenewRequest]]:
        """The round's streams less, while the table throttles, those whose backstop is not
        due and whose last round was not put off already (see the module's docstring)."""
        ids = {c.held.lease.conn_id for c in held}
        if not self.throttled():
            self._put_off -= ids
            return held, requests
        later = {c.held.lease.conn_id for c, r in zip(held, requests, strict=True)
                 if not r.extend and c.held.lease.conn_id not in self._put_off}
        # Kept only for the streams still held: one that left meanwhile is forgotten.
        self._put_off = ((self._put_off - ids) & set(self.streams)) | later
        kept = [(c, r) for c, r in zip(held, requests, strict=True)
                if c.held.lease.conn_id not in later]
        return [c for c, _ in kept], [r for _, r in kept]

    async def anchor(self, conn: Connection, seq: int) -> bool:
        """Write ``seq`` as the first checkpoint of a never-checkpointed stream, batched with
        every other anchor asked for meanwhile; True once written, False if it was not (the
        caller tries again: nothing may be handled before it lands)."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._anchors.append((conn, seq, done))
        if self._anchoring is None or self._anchoring.done():
            self._anchoring = asyncio.create_task(self._write_anchors())
        return await done

    async def _write_anchors(self) -> None:
        while self._anchors:
            await asyncio.sleep(0)  # the anchors asked for in this loop pass go together
            batch, self._anchors = self._anchors, []
            landed: list[bool] | None = None
            try:
                landed = await self._renew([c for c, _, _ in batch],
                                           [RenewRequest(c.held.lease, seq, extend=False)
                                            for c, seq, _ in batch], "first checkpoint")
            finally:
                for i, (_, _, done) in enumerate(batch):
                    if not done.done():  # not landed if the write did not answer at all
                        done.set_result(bool(landed and landed[i]))

    async def _renew(self, held: list[Connection], requests: list[RenewRequest],
                     source: str) -> list[bool]:
        """One ``renew_many`` for ``held``, then each stream acts on its own outcome; which
        writes landed."""
        sent = self.mono()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self.executor, functools.partial(renew_many, self.store, requests, self.mode,
                                                 pool=self.chunk_pool))
        except HoldfastError as exc:  # e.g. ConfigError: table gone, credentials refused
            logger.error(f"{source} write failed", error=str(exc)[:500], streams=len(held))
            self.metrics.incr(names.METRIC_RENEW_FAILURES, len(held))
            return [False] * len(held)
        took = self.mono() - sent
        self.metrics.renew_latency(took)
        if took > self.timing.heartbeat_ms:
            logger.warning(f"slow {source} write: longer than a heartbeat period",
                           took_ms=took, streams=len(held))
        for conn, request, result in zip(held, requests, results, strict=True):
            if result.lease is not None:
                # Ignored by a stream that stopped meanwhile (its release has begun).
                conn.held.renewed(result.lease,
                                  self.fence_after(sent) if request.extend else None)
            elif isinstance(result.error, LeaseLost):
                self.on_lost(conn, result.error, source)
            else:
                self.metrics.incr(names.METRIC_RENEW_FAILURES)
                conn.log("warning", f"{source} write failed, trying again next round",
                         error=str(result.error)[:300])
        return [result.lease is not None for result in results]

    def on_lost(self, conn: Connection, lost: LeaseLost, source: str = "checkpoint") -> None:
        """Act on a stream found lost: drain a STOPPED stream, stop any other at once."""
        reason = lost.reason
        if not conn.held.live or conn.held.stop_reason == HANDOFF:
            return  # ended, or being passed on by our own transfer (a write in flight met it)
        if reason is LossReason.STOPPED:
            if conn.held.stopping:
                return
            conn.log("info", "stream STOPPED, closing")
            conn.drain_to(None, STOPPED)  # to nobody, whatever a handoff's READY named
        elif ours_to_take(conn, lost) and not conn.held.stopping:
            # Delivers meanwhile: nobody else holds it yet. (Another URL: a new stream under
            # the same id, deleted and created again; stopping: given back, below.)
            self.takeback.soon(conn, source)
        elif reason is LossReason.REGRESSION:
            stored = lost.current.last_seq if lost.current else None
            if stored is not None and conn.held.checkpoint is not None and (
                    stored <= conn.held.checkpoint):
                # Not past what we handled: our own later write stored it (a take-back's, which
                # writes our live checkpoint), overtaking this one: nothing moved past ours.
                return
            # Still ours (the owner and epoch matched): no more handler calls, then released
            # (``Endings.finish``) without overwriting the checkpoint someone moved.
            conn.log("warning", "stored checkpoint moved past ours: stopping and releasing",
                     stored_seq=lost.current.last_seq if lost.current else None,
                     checkpoint=conn.held.checkpoint, source=source)
            conn.abort(REGRESSED)
        else:
            # LOST/DELETED/INVALID: someone else may hold it now; no more handler calls and
            # no more bytes from this connection.
            current = lost.current
            conn.log("warning", "lease lost, closing at once", reason=str(reason),
                     owner=current.lease_owner if current else None,
                     epoch=current.epoch if current else None, my_epoch=conn.held.lease.epoch,
                     stored_seq=current.last_seq if current else None,
                     checkpoint=conn.held.checkpoint, source=source)
            conn.lose(str(reason))
            if reason is LossReason.OVERWRITTEN:  # stopping, or another URL: see give_back
                self.takeback.give_back_soon(conn, source)

    async def fence_watch(self, tick_s: float = 0.05) -> None:
        """Abort every stream whose fence deadline has passed; runs until cancelled."""
        while True:
            now = self.mono()
            for conn in list(self.streams.values()):
                deadline = conn.held.deadline()
                if now >= deadline and conn.held.live:
                    conn.log("error", "self-fencing: not renewed in time, stream stopped",
                             late_ms=now - deadline)
                    conn.fence()
            await self.sleep(tick_s)
