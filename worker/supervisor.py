"""The supervisor: owns the held streams, runs claimer, sweep, renewer, metrics and health.

Shutdown is a parameter (an awaitable that completes when the worker must stop), as in hypercorn.
The stop is two-phase and bounded by ``shutdown_s`` so that it fits ECS's stop timeout:

1. stop claiming (nudges received in flight go back to the queue at once);
2. drain every stream: the handler call in flight finishes, the connection closes, then the
   lease is released with its final checkpoint (``lease_expires_at_ms = 0``) so the router hands
   it on at once. Renewals and fencing go on meanwhile. What has not drained by 60% of the
   budget is aborted (the call in flight is not checkpointed) and released all the same.

One log line at the end counts what happened.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from holdfast.core.exceptions import (
    AcquireFailed,
    HoldfastError,
    LeaseLost,
    LossReason,
    SessionConflict,
    SessionLost,
    StoreUnavailable,
)
from holdfast.core.schema import BACKSTOP_MS
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from worker.backoff import Backoff
from worker.claimer import Claim, Claimer, Later, Reconciler
from worker.config import WorkerConfig
from worker.handler import Handler, default_handler
from worker.health import HealthServer
from worker.metrics import WorkerMetrics
from worker.protocol import QueryParamProtocol, ResumeProtocol
from worker.renewer import Renewer, monotonic_ms
from worker.session import SessionKeeper
from worker.stream import ConnectOptions, StreamContext, StreamRunner

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

__all__ = ["Worker"]

logger = Logger(service="holdfast-worker", child=True)
_DRAIN_SHARE = 0.6  # of the shutdown budget; the rest is for releases
# A nudge for a stream in back-off comes back when the back-off ends, if that is this soon
# (SQS's DelaySeconds limit, as the router uses); later ones are left to the sweep.
_MAX_LATER_S = 900


class Worker:
    """One worker process's state and tasks. ``run(shutdown_trigger)`` until told to stop."""

    def __init__(self, config: WorkerConfig, *, ddb: DynamoDBClient, sqs: SQSClient,
                 handler: Handler = default_handler, protocol: ResumeProtocol | None = None,
                 wall: Callable[[], int] = wall_clock_ms, mono: Callable[[], int] = monotonic_ms,
                 metrics: WorkerMetrics | None = None) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self.ddb, self.sqs = ddb, sqs
        self.wall, self.mono = wall, mono
        self.metrics = metrics or WorkerMetrics()
        self.session_mode = config.liveness == "session"
        # With sessions a stream's own expiry is a far backstop; the session keeps it alive.
        self.store = LeaseStore(ddb, config.table,
                                lease_ms=BACKSTOP_MS if self.session_mode else config.lease_ms,
                                skew_ms=config.timing.skew_ms, clock=wall)
        self.sessions = SessionStore(
            ddb, config.session_table or "", config.table, ttl_ms=config.lease_ms,
            skew_ms=config.timing.skew_ms, clock=wall) if self.session_mode else None
        self.keeper: SessionKeeper | None = None
        # lease_owner of what we acquire: the session's owner (worker id and incarnation), or
        # the bare worker id in the seed's lease mode. None: no live session, claim nothing.
        self.owner: str | None = None if self.session_mode else config.worker_id
        self.streams: dict[str, StreamRunner] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._claiming: set[str] = set()
        self.stopping = False
        self.started_mono_ms = mono()
        self.counts: Counter[str] = Counter()
        self.ctx = StreamContext(
            worker_id=config.worker_id, handler=handler,
            protocol=protocol or QueryParamProtocol(), metrics=self.metrics,
            policy=config.url_policy,
            backoff=Backoff(config.reconnect_base_s, config.reconnect_cap_s,
                            config.max_upstream_failures, config.retry_base_s),
            options=ConnectOptions(max_size=config.max_frame_bytes,
                                   compression=config.compression,
                                   open_timeout_s=config.open_timeout_s,
                                   send_worker_id=config.send_worker_id),
            anchor=self._anchor, session_fence=self._session_fence)
        self.renewer = Renewer(self.store, self.streams, config.timing, self.metrics,
                               config.renew_mode, mono=mono, session_mode=self.session_mode,
                               checkpoint_ms=config.checkpoint_ms, wall=wall)

    def _session_fence(self) -> int:
        if self.keeper is None:
            return 2**62  # lease mode: each stream's own lease fences it
        return self.keeper.fence_mono_ms

    # -- capacity and claims ---------------------------------------------------------------
    def free_capacity(self) -> int:
        if self.stopping or self.owner is None:
            return 0
        return self.config.max_connections - len(self.streams) - len(self._claiming)

    async def claim(self, conn_id: str, source: str = "nudge") -> Claim | Later:
        """Try to acquire ``conn_id`` and start holding it."""
        if conn_id in self.streams or conn_id in self._claiming:
            return Claim.CONFLICT  # already ours (a duplicate nudge)
        owner = self.owner
        if self.free_capacity() <= 0 or owner is None:
            return Claim.NO_CAPACITY
        self._claiming.add(conn_id)
        try:
            sent = self.mono()
            lease = await asyncio.to_thread(self.store.acquire, conn_id, owner)
        except AcquireFailed as exc:
            self.metrics.incr("ClaimConflicts")
            logger.debug("claim refused", conn_id=conn_id, worker_id=self.worker_id,
                         reason=str(exc.reason), source=source)
            return self._later(exc) or Claim.CONFLICT
        except StoreUnavailable as exc:
            logger.warning("claim failed, DynamoDB unavailable", conn_id=conn_id,
                           worker_id=self.worker_id, error=str(exc)[:300])
            return Claim.UNAVAILABLE
        except HoldfastError as exc:
            logger.error("claim failed", conn_id=conn_id, worker_id=self.worker_id,
                         error=str(exc)[:300])
            return Claim.UNAVAILABLE
        finally:
            self._claiming.discard(conn_id)
        self.metrics.incr("Claims")
        self.counts["claimed"] += 1
        runner = StreamRunner(lease, self.ctx, fence_mono_ms=self.renewer._fence_after(sent))
        if self.owner != owner:  # the session was lost while we were acquiring
            runner.stop_reason = "lost:session"
        self.streams[conn_id] = runner
        runner.log("info", "claimed", source=source, epoch=lease.epoch, last_seq=lease.last_seq)
        if self.stopping:  # the stop began while we were acquiring: hand it straight back
            runner.stop_reason = "shutdown"
        task = asyncio.create_task(self._hold(runner), name=f"stream:{conn_id}")
        runner.task = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return Claim.CLAIMED

    def _later(self, exc: AcquireFailed) -> Later | None:
        """For a stream in back-off: when its nudge should come back (None: let it go)."""
        current = exc.current
        if exc.reason is not LossReason.BACKOFF or current is None or (
                current.lease_expires_at_ms is None):
            return None
        wait_ms = current.lease_expires_at_ms + self.config.timing.skew_ms - self.wall()
        seconds = -(-wait_ms // 1000) + 1  # round up, plus a second for clock jitter
        return Later(int(seconds)) if 0 < seconds <= _MAX_LATER_S else None

    async def _anchor(self, runner: StreamRunner, seq: int) -> None:
        """Write a never-checkpointed stream's starting point before its first handler call."""
        sent = self.mono()
        try:
            lease = await asyncio.get_running_loop().run_in_executor(
                self.renewer.executor, functools.partial(
                    self.store.renew, runner.lease, seq, extend=not self.session_mode))
        except LeaseLost as exc:
            self.renewer.on_lost(runner, exc, "first checkpoint")
            return
        except HoldfastError as exc:  # the next heartbeat writes the checkpoint instead
            runner.log("warning", "cannot write the first checkpoint", error=str(exc)[:300])
            return
        if not (runner.aborted or runner.closed):
            runner.lease = lease
            if not self.session_mode:
                runner.fence_mono_ms = self.renewer._fence_after(sent)

    # -- the session ----------------------------------------------------------------------
    async def _start_session(self) -> None:
        """Start a new incarnation; wait out a predecessor with our id, refuse a live twin."""
        assert self.sessions is not None
        timing = self.config.timing
        # A crashed predecessor stops counting as alive after TTL + skew; one that still
        # heartbeats after that long is a second live process with our id.
        deadline = self.mono() + timing.lease_ms + timing.skew_ms + 2 * timing.heartbeat_ms
        warned = False
        while True:
            sent = self.mono()
            try:
                session = await asyncio.to_thread(
                    self.sessions.start, self.worker_id, self.config.max_connections)
                break
            except SessionConflict as conflict:
                if self.mono() >= deadline:
                    raise
                if not warned:
                    logger.warning("worker id in use by a live session: waiting for it to "
                                   "expire", worker_id=self.worker_id,
                                   incarnation=conflict.incarnation,
                                   expires_in_ms=conflict.expires_in_ms)
                    warned = True
            except StoreUnavailable as exc:
                logger.warning("cannot start the session yet", error=str(exc)[:300])
            await asyncio.sleep(min(1.0, timing.heartbeat_ms / 1000))
        if self.keeper is None:
            self.keeper = SessionKeeper(
                self.sessions, session, timing, self.metrics, held=lambda: len(self.streams),
                capacity=self.config.max_connections, stop_stream=self._stop_order,
                on_lost=self._session_lost, mono=self.mono)
        self.keeper.started(session, sent)
        self.owner = session.owner
        logger.info("session started", worker_id=self.worker_id, owner=session.owner)

    def _stop_order(self, conn_id: str) -> bool:
        runner = self.streams.get(conn_id)
        if runner is None or runner.stopping:
            return False
        runner.log("info", "stream STOPPED (order), closing")
        runner.drain("stopped")
        return True

    async def _session_lost(self, lost: SessionLost) -> None:
        """Our session is dead or replaced: nothing of it may be used any more."""
        self.owner = None
        self.counts["sessions_lost"] += 1
        for runner in list(self.streams.values()):
            if not (runner.aborted or runner.closed):
                self.metrics.incr("LeasesLost")
                runner.log("warning", "session lost, closing at once", why=lost.why)
                runner.abort("lost:session")
        await self._wait_tasks(5.0)
        if not self.stopping:
            await self._start_session()

    # -- one stream's life -------------------------------------------------------------------
    async def _hold(self, runner: StreamRunner) -> None:
        error: str | None = None
        try:
            if not runner.stopping:
                error = await runner.run()
        except asyncio.CancelledError:
            if not runner.stopping:
                runner.stop_reason = "cancelled"
        except Exception as exc:  # a bug must cost one stream, never the worker
            error = f"internal error: {type(exc).__name__}: {exc}"[:500]
            runner.log("exception", "stream task failed")
        runner.closed = True
        try:
            await self._finish(runner, error)
        finally:
            self.streams.pop(runner.conn_id, None)

    async def _finish(self, runner: StreamRunner, error: str | None) -> None:
        reason = runner.stop_reason or ""
        if reason.startswith("lost:"):
            self.counts["lost"] += 1
            return  # not ours any more: nothing to write
        if reason == "fenced":
            self.counts["fenced"] += 1
            await self._release(runner, attempts=1)  # best effort: it may be ours still
            return
        if error is not None and not runner.stopping:
            self.counts["gave_up"] += 1
            self.metrics.incr("UpstreamGiveUps")
            retry_s = self.ctx.backoff.retry_after_s(runner.lease.error_count + 1)
            await self._release(runner, error=error, retry_at_ms=self.wall() + round(
                retry_s * 1000))
            runner.log("warning", "stream handed back after errors", error=error,
                       retry_in_s=round(retry_s, 1))
            return
        outcome = await self._release(runner)
        self.counts["released" if outcome == "released" else f"release_{outcome}"] += 1

    async def _release(self, runner: StreamRunner, *, attempts: int = 20,
                       error: str | None = None, retry_at_ms: int | None = None) -> str:
        for attempt in range(attempts):
            try:
                lost = await asyncio.to_thread(self.store.release, runner.lease,
                                               runner.checkpoint, error=error,
                                               retry_at_ms=retry_at_ms)
            except StoreUnavailable as exc:
                if attempt + 1 < attempts and self.mono() < runner.fence_mono_ms:
                    await asyncio.sleep(0.2 * (attempt + 1))
                    continue
                runner.log("warning", "release failed: the lease will expire instead",
                           error=str(exc)[:300])
                return "failed"
            except HoldfastError as exc:
                runner.log("error", "release failed", error=str(exc)[:300])
                return "failed"
            if lost is not None and lost is not LossReason.STOPPED:
                return f"not_ours_{lost}"
            runner.log("info", "released", checkpoint=runner.checkpoint,
                       handled=runner.handled)
            return "released"
        return "failed"

    # -- the service loops --------------------------------------------------------------------
    async def _guard(self, name: str, coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run a service loop; an unexpected crash is logged and the loop restarted."""
        while True:
            try:
                await coro()
                return
            except Exception:
                logger.exception("service loop crashed, restarting", loop=name,
                                 worker_id=self.worker_id)
                await asyncio.sleep(1.0)

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.metrics_s)
            self.flush_metrics()

    def flush_metrics(self) -> None:
        self.metrics.active = len(self.streams)
        self.metrics.flush()

    def healthy(self) -> bool:
        """False once DynamoDB has not answered decisively for longer than a lease."""
        last = (self.keeper.last_ok_mono_ms if self.keeper is not None
                else self.renewer.last_ok_mono_ms)
        since = self.started_mono_ms if last is None else last
        return self.mono() - since <= self.config.lease_ms

    async def run(self, shutdown_trigger: Callable[[], Awaitable[object]]) -> Counter[str]:
        """Hold streams until ``shutdown_trigger`` completes, then stop gracefully."""
        cfg = self.config
        started = time.monotonic()
        claimer = Claimer(self.sqs, cfg.queue_url, self.claim, self.free_capacity, self.metrics,
                          poll_s=cfg.poll_s, pollers=cfg.pollers,
                          visibility_s=cfg.nudge_visibility_s)
        health = HealthServer(cfg.health_port, self) if cfg.health_port else None
        if self.session_mode:
            await self._start_session()
        logger.info("worker started", worker_id=self.worker_id, table=cfg.table,
                    max_connections=cfg.max_connections, lease_ms=cfg.lease_ms,
                    heartbeat_ms=cfg.heartbeat_ms, renew_mode=cfg.renew_mode,
                    liveness=cfg.liveness, checkpoint_ms=cfg.checkpoint_ms, owner=self.owner)
        async with asyncio.TaskGroup() as tg:
            claiming = [tg.create_task(self._guard("claimer", claimer.run))]
            if cfg.reconcile_s > 0:
                reconciler = Reconciler(self.ddb, cfg.table, cfg.timing.skew_ms, self.claim,
                                        self.free_capacity, cfg.reconcile_s, self.wall,
                                        rand=random.random, sessions=self.sessions)
                claiming.append(tg.create_task(self._guard("reconcile", reconciler.run)))
            keep = [tg.create_task(self._guard("renewer", self.renewer.run)),
                    *([tg.create_task(self._guard("session", self.keeper.run))]
                      if self.keeper is not None else []),
                    tg.create_task(self._guard("fence", self.renewer.fence_watch)),
                    tg.create_task(self._guard("metrics", self._metrics_loop))]
            if health is not None:
                keep.append(tg.create_task(self._guard("health", health.run)))
            await shutdown_trigger()
            logger.info("stopping: no more claims, draining streams", worker_id=self.worker_id,
                        streams=len(self.streams))
            self.stopping = True
            stop_t0 = time.monotonic()
            for task in claiming:
                task.cancel()
            await self._stop_streams()
            # Nudges for the streams just released may sit in our own last polls: hand them on.
            await claimer.finish_polls(min(cfg.poll_drain_s, max(
                0.0, cfg.shutdown_s - (time.monotonic() - stop_t0))))
            if self.keeper is not None and self.sessions is not None:
                # Goodbye: the sweeper releases whatever we could not, without waiting a TTL.
                try:
                    await asyncio.to_thread(self.sessions.end, self.keeper.session)
                except HoldfastError as exc:
                    logger.warning("cannot end the session; it will expire",
                                   error=str(exc)[:300])
            for task in keep:
                task.cancel()
        if self.keeper is not None:
            self.keeper.executor.shutdown(wait=False, cancel_futures=True)
        self.renewer.executor.shutdown(wait=False, cancel_futures=True)
        self.renewer.chunk_pool.shutdown(wait=False, cancel_futures=True)
        self.flush_metrics()
        self.counts["left_running"] = len(self.streams)
        logger.info("worker stopped", extra={
            "worker_id": self.worker_id, "uptime_s": round(time.monotonic() - started, 3),
            "stop_s": round(time.monotonic() - stop_t0, 3),
            "messages": self.metrics.totals["MessagesHandled"],
            "handler_errors": self.metrics.totals["HandlerErrors"], **self.counts})
        return self.counts

    async def _stop_streams(self) -> None:
        budget = self.config.shutdown_s
        t0 = time.monotonic()
        for runner in list(self.streams.values()):
            runner.drain("shutdown")
        await self._wait_tasks(budget * _DRAIN_SHARE)
        slow = [r for r in self.streams.values() if not r.closed]
        for runner in slow:
            runner.log("warning", "handler still busy at the drain deadline: aborting")
            runner.abort("shutdown-timeout")
        await self._wait_tasks(max(0.0, budget - (time.monotonic() - t0) - 0.5))
        for task in list(self.tasks):
            task.cancel()  # releases still hanging on DynamoDB: the leases will expire
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=0.5)

    async def _wait_tasks(self, timeout_s: float) -> None:
        if self.tasks and timeout_s > 0:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)
