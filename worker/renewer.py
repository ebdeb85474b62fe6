"""Per-stream writes and self-fencing for every lease a worker holds.

With sessions (the default) the session keeps streams alive, and this writes each running
stream's checkpoint every ``checkpoint_ms`` when its seq moved (no index key changes), plus,
about twice an hour, the far backstop expiry. In the seed's ``lease`` mode, every heartbeat is
one ``renew_many`` (batched PartiQL, or single UpdateItems on moto) for all
held leases, each carrying its checkpoint. Outcomes per lease:

- renewed: new expiry, fence deadline moved to ``sent + lease - skew - margin`` (monotonic);
- LOST or DELETED: abort the stream at once (another worker may already be connected);
- STOPPED: drain it (finish the handler call, close) and release with the final checkpoint;
- StoreUnavailable: keep it, try again next heartbeat; the fence watcher stops it at its
  deadline, before the lease can expire for anyone else.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger

from holdfast.core import rules
from holdfast.core.batch import RenewMode, RenewRequest, renew_many
from holdfast.core.exceptions import HoldfastError, LeaseLost, LossReason
from holdfast.core.model import Lease
from holdfast.core.schema import BACKSTOP_MS
from holdfast.core.store import LeaseStore, wall_clock_ms
from worker.connection import Connection
from worker.metrics import WorkerMetrics

__all__ = ["Renewer", "monotonic_ms"]

logger = Logger(service="holdfast-worker", child=True)
_HEALTH_PROBE_ID = "__holdfast_health_probe__"


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass
class Renewer:
    """Renews the leases in ``streams`` every heartbeat and fences the ones it cannot renew."""

    store: LeaseStore
    streams: dict[str, Connection]
    timing: rules.LeaseTiming
    metrics: WorkerMetrics
    mode: RenewMode = "batch"
    mono: Callable[[], int] = monotonic_ms
    # Sessions: write checkpoints every ``checkpoint_ms``; the lease's own expiry is a backstop.
    session_mode: bool = False
    checkpoint_ms: int = 20_000
    wall: Callable[[], int] = wall_clock_ms
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    last_ok_mono_ms: int | None = None  # last decisive answer from DynamoDB (for /health)
    # Renewals get threads of their own: a burst of claims or releases queued on the default
    # executor must never delay a heartbeat into the fence.
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=2, thread_name_prefix="holdfast-renew"))
    # The batch calls of one heartbeat run side by side (boto3 clients are thread-safe), so
    # thousands of leases renew in a few round-trip times, not one per 25 leases.
    chunk_pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=4, thread_name_prefix="holdfast-renew-chunk"))

    async def _in_executor(self, fn: Callable[[], object]) -> object:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def run(self) -> None:
        """Heartbeat until cancelled."""
        period_ms = self.checkpoint_ms if self.session_mode else self.timing.heartbeat_ms
        while True:
            started = self.mono()
            await self.heartbeat()
            elapsed_s = (self.mono() - started) / 1000
            await self.sleep(max(0.0, period_ms / 1000 - elapsed_s))

    def _backstop_due(self, lease: Lease) -> bool:
        """Refresh a stream's backstop expiry once half of it is gone."""
        return lease.expires_at_ms - self.wall() < BACKSTOP_MS // 2

    def fence_after(self, sent: int) -> int:
        """The fence deadline of a lease whose renewal (or acquire) was sent at ``sent``."""
        if self.session_mode:
            return sent + BACKSTOP_MS - self.timing.skew_ms - self.timing.margin_ms
        return rules.fence_deadline_mono_ms(sent, self.timing)

    async def heartbeat(self) -> None:
        """Renew every held lease once (one batched call) and act on each outcome."""
        # Draining streams are renewed too: a slow graceful stop must not run into the fence.
        held = [c for c in self.streams.values() if c.held.live]
        if not held:
            if not self.session_mode:
                await self._probe()
            return
        if self.session_mode:
            requests = [RenewRequest(c.held.lease, c.held.checkpoint,
                                     extend=self._backstop_due(c.held.lease)) for c in held]
        else:
            requests = [RenewRequest(c.held.lease, c.held.checkpoint) for c in held]
        sent = self.mono()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self.executor, functools.partial(renew_many, self.store, requests, self.mode,
                                                 pool=self.chunk_pool))
        except HoldfastError as exc:  # e.g. ConfigError: table gone, credentials refused
            logger.error("heartbeat failed", error=str(exc)[:500], leases=len(held))
            self.metrics.incr("RenewFailures", len(held))
            return
        took = self.mono() - sent
        self.metrics.renew_latency(took)
        if took > self.timing.heartbeat_ms:
            logger.warning("slow heartbeat: renewals took longer than the heartbeat period",
                           took_ms=took, leases=len(held))
        decisive = False
        for conn, request, result in zip(held, requests, results, strict=True):
            if result.lease is not None:
                decisive = True
                # Ignored by a stream that stopped meanwhile (its release has begun).
                conn.held.renewed(result.lease,
                                  self.fence_after(sent) if request.extend else None)
            elif isinstance(result.error, LeaseLost):
                decisive = True
                self.on_lost(conn, result.error)
            else:
                self.metrics.incr("RenewFailures")
                conn.log("warning", "renew failed, keeping the lease until its fence deadline",
                         error=str(result.error)[:300],
                         fence_in_ms=conn.held.fence_mono_ms - self.mono())
        if decisive:
            self.last_ok_mono_ms = sent

    def on_lost(self, conn: Connection, lost: LeaseLost, source: str = "heartbeat") -> None:
        """Act on a lease found lost: drain a STOPPED stream, stop any other at once."""
        reason = lost.reason
        if not conn.held.live:
            return
        if reason is LossReason.STOPPED:
            if conn.held.stopping:
                return
            conn.log("info", "stream STOPPED, closing")
            conn.drain("stopped")
        else:
            # LOST/DELETED/REGRESSION/INVALID: someone else may hold it now; no more handler
            # calls and no more bytes from this connection.
            self.metrics.incr("LeasesLost")
            current = lost.current
            conn.log("warning", "lease lost, closing at once", reason=str(reason),
                     owner=current.lease_owner if current else None,
                     epoch=current.epoch if current else None, my_epoch=conn.held.epoch,
                     stored_seq=current.last_seq if current else None,
                     checkpoint=conn.held.checkpoint, source=source)
            conn.lose(str(reason))

    async def _probe(self) -> None:
        """With nothing to renew, one cheap read keeps the health signal honest."""
        sent = self.mono()
        try:
            await self._in_executor(functools.partial(self.store.get_raw, _HEALTH_PROBE_ID))
        except HoldfastError:
            return
        self.last_ok_mono_ms = sent

    async def fence_watch(self, tick_s: float = 0.05) -> None:
        """Abort every stream whose fence deadline has passed; runs until cancelled."""
        while True:
            now = self.mono()
            for conn in list(self.streams.values()):
                deadline = conn.held.deadline()
                if now >= deadline and conn.held.live:
                    self.metrics.incr("LeasesFenced")
                    conn.log("error", "self-fencing: lease not renewed in time, stream stopped",
                             late_ms=now - deadline)
                    conn.fence()
            await self.sleep(tick_s)
