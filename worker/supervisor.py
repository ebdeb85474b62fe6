"""The supervisor: owns the session and the held streams, runs claimer, sweep, checkpoints,
metrics and health (``worker.services``).

Shutdown is a parameter (an awaitable that completes when the worker must stop), as in hypercorn;
a lost session that cannot be started again stops the worker the same way. The session's start,
its loss and its restart are ``worker.sessionlife``.
The stop is bounded by ``shutdown_s`` so that it fits ECS's stop timeout:

1. stop claiming (nudges received in flight go back to the queue at once; a claim whose
   acquire is on its way ends, and its start hands the stream straight back);
2. stop every stream (``worker.stopping``): warm handoffs first, then drains and releases
   naming the decider's successors, aborts at the drain deadline. The session heartbeat,
   checkpoints and fencing go on meanwhile;
3. goodbye (``worker.stopping``): the last handoff messages, nudges of our last polls handed
   back, the session ended (the sweeper then releases whatever we could not, without waiting
   a TTL). The wait for our last polls leaves it the budget's last ``goodbye_s``.

One log line at the end counts what happened.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.core.exceptions import SessionLost
from holdfast.core.nudge import REASON_HANDOFF, Nudge
from holdfast.core.orders import ORDER_RETAKE, Order
from holdfast.core.session_items import ENDED_BEFORE_START
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.worker.balancing import Balancing, owned_elsewhere_by
from holdfast.worker.beatrules import publish_ms
from holdfast.worker.budget import ConnectBudget
from holdfast.worker.checkpointer import Checkpointer
from holdfast.worker.claims import SOURCE_HANDOFF
from holdfast.worker.config import WorkerConfig
from holdfast.worker.connection import Connection
from holdfast.worker.gathered import STOP_CALLS_IN_FLIGHT
from holdfast.worker.handler import Handler, default_handler
from holdfast.worker.handoff import Handoffs
from holdfast.worker.held import NO_FENCE_MS, monotonic_ms, ordered_reason
from holdfast.worker.holdings import Holdings
from holdfast.worker.incarnation import end_kept_session, restart_for_ms
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.loopclock import LoopClock
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.orders import OrderInbox
from holdfast.worker.outbox import Outbox
from holdfast.worker.protocol import QueryParamProtocol, ResumeProtocol
from holdfast.worker.services import Services, guard
from holdfast.worker.session import SessionKeeper
from holdfast.worker.sessionlife import lose_session, start_session
from holdfast.worker.stopping import (
    goodbye,
    goodbye_s,
    stop_streams,
    unless_told_first,
    until_first,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

__all__ = ["Supervisor"]

logger = Logger(service=WORKER_LOGGER, child=True)


class Supervisor:
    """One worker process's state and tasks. ``run(shutdown_trigger)`` until told to stop.

    Claims and releases are ``holdings`` (``worker.holdings``); this is the lifecycle around
    them: the session, the service loops and the graceful stop.
    """

    def __init__(self, config: WorkerConfig, *, ddb: DynamoDBClient, sqs: SQSClient,
                 handler: Handler = default_handler, protocol: ResumeProtocol | None = None,
                 wall: Callable[[], int] = wall_clock_ms, mono: Callable[[], int] = monotonic_ms,
                 metrics: WorkerMetrics | None = None,
                 session_ddb: DynamoDBClient | None = None) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self.ddb, self.sqs = ddb, sqs
        self.wall, self.mono = wall, mono
        # The loop's one clock: the session keeper stamps it, everyone else reads it.
        self.loop_clock = LoopClock(mono, tick_ms=publish_ms(config.timing))
        self.metrics = metrics or WorkerMetrics()
        # A stream's own expiry is the store's far backstop; the session keeps it alive.
        self.store = LeaseStore(ddb, config.table, skew_ms=config.timing.skew_ms, clock=wall)
        # The session's own calls (start, heartbeat, end) may have a client of their own
        # (``session_ddb``): under throttling the heartbeat is the one call that must not queue
        # behind the shared rate limiter of everything else; it bounds its own retries by its
        # fence. The reconcile sweep's session reads and releases are bulk work: ``ddb``.
        self.sessions, self.sweep_sessions = (SessionStore(
            client, config.session_table, config.table, ttl_ms=config.lease_ms,
            skew_ms=config.timing.skew_ms, clock=wall, reap_mode=config.renew_mode)
            for client in (session_ddb or ddb, ddb))
        self.streams: dict[str, Connection] = {}
        # Rebalancing (targets and drains reach our session) and the fleet's reconnect budget.
        self.budget = ConnectBudget(config.connect_rate, config.connect_burst)  # rate 0: no limit
        self.balancing = Balancing(
            self.streams, cooldown_ms=config.cooldown_ms, drain_at_once=config.drain_at_once,
            wall=wall, mono=mono, metrics=self.metrics, budget=self.budget,
            owned_elsewhere=owned_elsewhere_by(self.store, lambda: self.owner))
        self.keeper: SessionKeeper | None = None  # from the first session start on
        # Stop orders sent straight to us (sub-second); the session item stays their backstop.
        self.inbox = OrderInbox(sqs, config.orders_queue_prefix, self.carry_out,
                                directive=self.balancing.news, handoff=self._handoff) if (
            config.orders_queue_prefix) else None
        # lease_owner of what we acquire: our session's owner (worker id and incarnation).
        # None: no live session, claim nothing.
        self.owner: str | None = None
        self.stopping = False
        # A lost session that could not be started again (``worker.incarnation``): the
        # worker stops as if told to, and ``run`` counts ``session_not_restarted``.
        self.restart_for_ms = restart_for_ms(config.timing)
        self.restart_failed = asyncio.Event()
        self.counts: Counter[str] = Counter()
        self.checkpointer = Checkpointer(self.store, self.streams, config.timing, self.metrics,
                                         config.renew_mode, mono=mono,
                                         checkpoint_ms=config.checkpoint_ms, wall=wall)
        self.holdings = Holdings(
            config, self.store, self.checkpointer, handler=handler,
            protocol=protocol or QueryParamProtocol(), streams=self.streams,
            owner=lambda: self.owner, stopping=lambda: self.stopping,
            # No session yet (no keeper): nothing is held.
            session_fence=lambda: self.keeper.fence_mono_ms if self.keeper else NO_FENCE_MS,
            wall=wall, mono=mono, metrics=self.metrics,
            counts=self.counts, balancing=self.balancing,
            admit_connect=self.budget.admit,
            loop_lag_ms=self.loop_clock.lag_ms)
        self.tasks = self.holdings.tasks  # the connection tasks, awaited by the stop
        self.holdings.endings.give_back = self.checkpointer.takeback.give_back_soon
        self.holdings.endings.unreleased = self.checkpointer.takeback.unreleased
        # Make-before-break handoffs: they need order queues (ours and the successor's).
        self.outbox = Outbox(sqs=sqs, queue_url=config.queue_url,  # unused without handoffs
                             prefix=config.orders_queue_prefix or "")
        self.handoffs = Handoffs(
            outbox=self.outbox, store=self.store, streams=self.streams, ctx=self.holdings.ctx,
            owner=lambda: self.owner, room=self.free_capacity,
            start=self.holdings.start_warm,
            claim=lambda conn_id: self.holdings.claim(conn_id, SOURCE_HANDOFF), mono=mono,
            single_connection=config.single_connection,
            withdraws=self.balancing.withdraws,
            give_back=self.checkpointer.takeback.give_back_soon) if self.inbox is not None and (
            config.orders_queue_prefix) else None
        if self.handoffs is not None:
            assert self.inbox is not None
            self.inbox.step = self.handoffs.on_step
            self.balancing.offer = self.handoffs.offer
            self.holdings.endings.transfer = self.handoffs.transfer
            self.holdings.endings.named_release = self.handoffs.released
            self.holdings.incoming = self.handoffs.warm_ups.incoming
        self._handoffs: set[asyncio.Task[object]] = set()  # claims of handoffs in flight

    async def _settled(self) -> None:
        """What the goodbye waits for before the session ends: the claims and releases in
        flight, then the give-backs of streams written over (``worker.takeback``)."""
        await self.holdings.settled()
        await self.checkpointer.takeback.settled()

    def free_capacity(self) -> int:
        return self.holdings.free_capacity()

    # -- the session: its orders and nudges (its start and loss: ``worker.sessionlife``) ------
    def carry_out(self, order: Order) -> bool:
        """Carry out an order (stop, release): the holder stops delivering and releases the
        stream itself, the only way a live holding ends (docs/concepts/protocol.md). A
        ``retake``: the holder writes back the holding a write outside the protocol removed
        (``worker.takeback``)."""
        conn = self.streams.get(order.conn_id)
        if order.verb == ORDER_RETAKE:
            if conn is None:  # ended: given back if its release got no answer
                return self.checkpointer.takeback.ordered_back(order.conn_id, order.epoch)
            if order.epoch != conn.held.lease.epoch:
                return False  # not ours (any more): its holder, if any, finds it itself
            self.checkpointer.takeback.soon(conn, "order")
            return True
        if conn is None:
            # On its way here (an acquire or a transfer that landed before the order was
            # written, its answer or TAKE not yet handled): carried out at its start.
            return self.holdings.order_on_start(order)
        if conn.held.stopping or not order.applies_to(conn.held.lease.epoch):
            return False
        conn.log("info", f"{order.verb} order: draining and releasing", epoch=order.epoch)
        # To nobody: a handoff's READY may have named a successor a moment ago, and the
        # release would then hold the stream for it (a restart waited out the hold).
        conn.drain_to(None, ordered_reason(order))
        return True

    def _handoff(self, nudge: Nudge) -> None:
        """A nudge on our own queue: a stream released to us by name, or one the sweeper sends
        a live worker (reaped, or unclaimed while a dead worker's polls may be pending). Claim
        it now (our capacity and drain still decide; if we cannot, the shared queue's nudge
        finds another). Counted as a handoff only if it is one."""
        source = SOURCE_HANDOFF if nudge.reason == REASON_HANDOFF else "nudge"
        task = asyncio.get_running_loop().create_task(
            self.holdings.claim(nudge.conn_id, source), name=f"handoff:{nudge.conn_id}")
        self._handoffs.add(task)
        task.add_done_callback(self._handoffs.discard)

    async def session_lost(self, lost: SessionLost) -> None:
        """Our session is dead or replaced (``sessionlife.lose_session``)."""
        await lose_session(self, lost)

    # -- the run (its service loops: ``worker.services``) -------------------------------------
    def flush_metrics(self) -> None:
        self.metrics.active = len(self.streams)
        self.metrics.flush()

    async def run(self, shutdown_trigger: Callable[[], Awaitable[object]]) -> Counter[str]:
        """Hold streams until ``shutdown_trigger`` completes, then stop gracefully."""
        cfg = self.config
        started = time.monotonic()
        services = Services(self)
        if not await unless_told_first(start_session(self), shutdown_trigger):
            logger.info("stopped before a session was started", worker_id=self.worker_id)
            if self.keeper is not None:  # written, and kept alive, before the stop came
                await end_kept_session(self.keeper, reason=ENDED_BEFORE_START)
            return self.counts  # nothing held
        keeper = self.keeper
        assert keeper is not None  # the session has started
        logger.info("worker started", worker_id=self.worker_id, version=cfg.version or None,
                    table=cfg.table, handler=cfg.handler or "none (messages only logged)",
                    max_connections=cfg.max_connections, lease_ms=cfg.lease_ms,
                    heartbeat_ms=cfg.heartbeat_ms, renew_mode=cfg.renew_mode,
                    checkpoint_ms=cfg.checkpoint_ms, owner=self.owner)
        async with asyncio.TaskGroup() as tg:
            claiming = [tg.create_task(guard(name, loop, self.worker_id))
                        for name, loop in services.claiming()]
            keep = [tg.create_task(guard(name, loop, self.worker_id))
                    for name, loop in services.keeping(keeper) if loop]
            if services.watchdog is not None:
                services.watchdog.start()
            # Told to stop, or no session could be started again.
            await until_first(shutdown_trigger, self.restart_failed.wait)
            # The stop's burst of allocations (a cancellation, a close and a release per stream)
            # tends to set off a full collection, most of all in a worker that took over many
            # streams a moment ago: 100-470 ms with the loop frozen, while every stream's
            # frames pile up unread. What lives now lives until exit: keep it out of the scans.
            gc.freeze()
            logger.info("stopping: no more claims, draining streams", worker_id=self.worker_id,
                        streams=len(self.streams),
                        session_not_restarted=self.restart_failed.is_set() or None)
            self.stopping = True
            # No more claims: the releases may have their threads.
            self.holdings.endings.releases.widen(STOP_CALLS_IN_FLIGHT)
            stop_t0 = time.monotonic()
            for task in claiming:
                task.cancel()
            await stop_streams(self.streams, self.tasks, budget_s=cfg.shutdown_s,
                               balancing=self.balancing, handoffs=self.handoffs, mono=self.mono,
                               mark_draining=None if self.owner is None else functools.partial(
                                   on_io_threads, self.sessions.set_draining, self.owner, True))
            steps = {"streams": time.monotonic()}
            left_s = cfg.shutdown_s - goodbye_s(cfg.shutdown_s) - (steps["streams"] - stop_t0)
            steps |= await goodbye(
                outbox=self.outbox, claimer=services.claimer, keeper=keeper,
                inbox=self.inbox,
                polls_s=min(cfg.poll_drain_s, max(0.0, left_s)),
                ends_at=stop_t0 + cfg.shutdown_s,
                releases_settled=self._settled,
                streams_running=lambda: sum(not t.done() for t in self.tasks))
            if services.watchdog is not None:
                services.watchdog.stop()
            for task in keep:
                task.cancel()
        self.checkpointer.takeback.cancel()
        for pool in (keeper.executor, self.checkpointer.executor, self.checkpointer.chunk_pool):
            pool.shutdown(wait=False, cancel_futures=True)
        self.flush_metrics()
        self.counts["left_running"] = len(self.streams)
        gc.unfreeze()  # an embedding process (the tests) goes on collecting as before
        logger.info("worker stopped", extra={
            "worker_id": self.worker_id, "uptime_s": round(time.monotonic() - started, 3),
            "stop_s": round(time.monotonic() - stop_t0, 3),
            # Where the stop's time went: each step's end, seconds after the signal.
            "stop_steps_s": {k: round(t - stop_t0, 2) for k, t in steps.items()},
            "messages": self.metrics.totals[names.METRIC_MESSAGES_HANDLED],
            "handler_errors": self.metrics.totals[names.METRIC_HANDLER_ERRORS], **self.counts})
        return self.counts
