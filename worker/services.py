"""A worker's service loops: what runs beside its streams, built from a ``Supervisor``'s parts,
each guarded (a crash is logged and the loop restarted).

Two groups, as the stop treats them (``worker.supervisor``): the claiming loops (claimer,
reconcile sweep, strays, balancing) take streams on or shed them and are cancelled when the
stop begins; the keeping loops (checkpoints, session, fence watch, metrics, orders, handoffs,
health) go on until the goodbye. The watchdog is a thread of its own, and its view of the
streams (the earliest fence, the park of a stuck one) is here too.

Apart from the supervisor, which owns the state, the session and the stop: this is the list of
what runs and how each is built, the part that changes when a loop is added.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.worker.claimer import Claimer
from holdfast.worker.handler import Message
from holdfast.worker.health import HealthServer
from holdfast.worker.held import NO_FENCE_MS
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.reconciler import Reconciler, Strays
from holdfast.worker.watchdog import Watchdog

if TYPE_CHECKING:
    from holdfast.worker.session import SessionKeeper
    from holdfast.worker.supervisor import Supervisor

__all__ = ["Loop", "Services", "guard"]

logger = Logger(service=WORKER_LOGGER, child=True)

Loop = Callable[[], Coroutine[Any, Any, None]]


async def guard(name: str, coro: Loop, worker_id: str) -> None:
    """Run a service loop; an unexpected crash is logged and the loop restarted."""
    while True:
        try:
            await coro()
            return
        except Exception:
            logger.exception("service loop crashed, restarting", loop=name,
                             worker_id=worker_id)
            await asyncio.sleep(1.0)


class Services:
    """The claimer, health server and watchdog of ``sup``, and the loops its ``run`` starts."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        cfg = sup.config
        self.claimer = Claimer(sup.sqs, cfg.queue_url, sup.holdings.claim, sup.free_capacity,
                               sup.metrics, poll_s=cfg.poll_s, pollers=cfg.pollers,
                               visibility_s=cfg.nudge_visibility_s, wall=sup.wall)
        self.health = (HealthServer(cfg.health_port, sup, sup.loop_clock)
                       if cfg.health_port else None)
        # A handler blocking the loop past a fence ends the process (``worker.watchdog``).
        self.watchdog = Watchdog(self.earliest_fence, sup.loop_clock,
                                 park=self.park_stuck, flush=sup.metrics.flush,
                                 margin_ms=cfg.timing.margin_ms) if cfg.watchdog else None

    def park_stuck(self, message: Message, error: str) -> None:
        """The watchdog's park of the stream whose handler call blocks the loop (its thread)."""
        conn = self.sup.streams.get(message.conn_id)
        if conn is not None and conn.held.lease.epoch == message.epoch:
            self.sup.holdings.endings.park_stuck(conn, error)

    def earliest_fence(self) -> int:
        """The first fence deadline (monotonic ms) among the streams still handling frames."""
        return min((c.held.deadline() for c in self.sup.streams.values() if c.held.live),
                   default=NO_FENCE_MS)

    def claiming(self) -> list[tuple[str, Loop]]:
        """The loops that take streams on (or shed them): all cancelled when the stop begins."""
        sup, cfg = self.sup, self.sup.config
        loops: list[tuple[str, Loop]] = [("claimer", self.claimer.run)]
        if cfg.reconcile_s > 0:
            loops.append(("reconcile", Reconciler(
                sup.ddb, cfg.table, cfg.timing.skew_ms, sup.holdings.claim,
                sup.free_capacity, cfg.reconcile_s, sup.wall, rand=random.random,
                sessions=sup.sweep_sessions, fleet=sup.budget.set_fleet,
                declared_dead=functools.partial(sup.metrics.incr,
                                                names.METRIC_DEAD_SESSIONS)).run))
        loops.append(("strays", Strays(sup.sweep_sessions, lambda: sup.owner,
                                       sup.holdings.claim, sup.holdings.busy,
                                       sup.holdings.release_stray).run))
        loops.append(("balancing", sup.balancing.run))
        return loops

    def keeping(self, keeper: SessionKeeper) -> list[tuple[str, Loop | None]]:
        """The loops that keep what is held (None: not run here): on until the goodbye."""
        sup = self.sup
        return [
            ("checkpoints", sup.checkpointer.run), ("session", keeper.run),
            ("fence", sup.checkpointer.fence_watch), ("metrics", self._metrics_loop),
            ("orders", sup.inbox.run if sup.inbox is not None else None),
            ("handoffs", sup.handoffs.run if sup.handoffs is not None else None),
            ("health", self.health.run if self.health is not None else None)]

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sup.config.metrics_s)
            self.sup.flush_metrics()
