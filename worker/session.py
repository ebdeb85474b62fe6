"""The worker's session: one heartbeat per worker keeps every stream it holds.

Each heartbeat is one conditional write of the session item (its incarnation, ALIVE). Outcomes:

- renewed: the session fence moves to ``sent + TTL - skew - margin`` (monotonic) for every
  stream at once; orders waiting in the item (``stop:<id>``) are carried out and acknowledged
  with the next heartbeat;
- ``SessionLost`` (the sweeper declared it DEAD after a pause, or a successor replaced it):
  every stream is aborted at once; ``on_lost`` lets the supervisor start a new incarnation;
- no decisive answer: keep going; the fence watcher stops every stream at the session fence,
  before the sweeper may declare the session dead (TTL + skew after the last renewal).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger

from holdfast.core import names, rules
from holdfast.core.exceptions import HoldfastError, SessionLost
from holdfast.core.sessions import Session, SessionStore, parse_order
from worker.metrics import WorkerMetrics

__all__ = ["SessionKeeper"]

logger = Logger(service="holdfast-worker", child=True)


@dataclass
class SessionKeeper:
    """Renews ``session`` every heartbeat; ``fence_mono_ms`` is when its streams must stop."""

    store: SessionStore
    session: Session
    timing: rules.LeaseTiming
    metrics: WorkerMetrics
    held: Callable[[], int]
    capacity: int
    stop_stream: Callable[[str], bool]  # True if the stream was ours and is now stopping
    on_lost: Callable[[SessionLost], Awaitable[None]]
    mono: Callable[[], int]
    fence_mono_ms: int = 0
    last_ok_mono_ms: int | None = None
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="holdfast-session"))
    _done: frozenset[str] = frozenset()

    def started(self, session: Session, sent_mono_ms: int) -> None:
        """A new incarnation was written at ``sent_mono_ms``."""
        self.session = session
        self._done = frozenset()
        self.fence_mono_ms = rules.fence_deadline_mono_ms(sent_mono_ms, self.timing)
        self.last_ok_mono_ms = sent_mono_ms

    async def run(self) -> None:
        """Heartbeat until cancelled."""
        while True:
            started = self.mono()
            await self.heartbeat()
            elapsed_s = (self.mono() - started) / 1000
            await self.sleep(max(0.0, self.timing.heartbeat_ms / 1000 - elapsed_s))

    async def heartbeat(self) -> None:
        sent = self.mono()
        session = self.session
        if sent >= self.fence_mono_ms:
            # Past the fence (paused, or DynamoDB silent too long): every stream has stopped
            # without a release we can trust, so this incarnation must never be renewed
            # again; a new one reaps it once its TTL has passed.
            logger.error("session fenced: no heartbeat landed in time", owner=session.owner,
                         late_ms=sent - self.fence_mono_ms)
            await self.on_lost(SessionLost(session.worker_id, session.incarnation,
                                           "fenced: not renewed within TTL - skew - margin"))
            return
        try:
            renewed, orders = await asyncio.get_running_loop().run_in_executor(
                self.executor, functools.partial(
                    self.store.heartbeat, session, held=self.held(), capacity=self.capacity,
                    done=self._done))
        except SessionLost as lost:
            self.last_ok_mono_ms = sent
            if session is self.session:  # not already replaced by a new incarnation
                logger.error("session lost: stopping every stream", owner=session.owner,
                             why=lost.why)
                await self.on_lost(lost)
            return
        except HoldfastError as exc:
            self.metrics.incr(names.METRIC_SESSION_RENEW_FAILURES)
            logger.warning("session heartbeat failed; streams keep running until the fence",
                           error=str(exc)[:300], fence_in_ms=self.fence_mono_ms - self.mono())
            return
        if session is not self.session:
            return
        took = self.mono() - sent
        self.metrics.renew_latency(took)
        if took > self.timing.heartbeat_ms:
            logger.warning("slow session heartbeat", took_ms=took)
        self.session = renewed
        self.last_ok_mono_ms = sent
        self.fence_mono_ms = max(self.fence_mono_ms,
                                 rules.fence_deadline_mono_ms(sent, self.timing))
        self._done = self._act_on(orders)

    def _act_on(self, orders: frozenset[str]) -> frozenset[str]:
        """Carry out every order once; all of them are acknowledged with the next heartbeat."""
        for order in sorted(orders - self._done):
            parsed = parse_order(order)
            if parsed is None:
                logger.warning("unknown order ignored", order=order[:200])
                continue
            _, conn_id = parsed
            stopping = self.stop_stream(conn_id)
            logger.info("stop order", conn_id=conn_id, held=stopping)
        return orders
