"""The worker's session: one heartbeat per worker keeps every stream it holds.

Each heartbeat is one conditional write of the session item (its incarnation, ALIVE). Outcomes:

- renewed: the session fence moves to ``sent + TTL - skew - margin`` (monotonic) for every
  stream at once; orders waiting in the item (``stop:<id>``) are carried out and acknowledged
  with the next heartbeat;
- ``SessionLost`` (the sweeper declared it DEAD after a pause, or a successor replaced it):
  every stream is aborted at once; ``on_lost`` lets the supervisor start a new incarnation;
- no decisive answer (throttled, timed out): retried after a short jittered pause until it lands
  or the session fence passes. Every attempt is bounded by the time left to the fence (the
  earliest fence deadline of every stream the session keeps), so one slow call cannot carry a
  renewal past it, and a throttle shorter than the usable window minus one heartbeat fences
  nothing. At the fence the streams stop, before the sweeper may declare the session dead
  (TTL + skew after the last renewal).
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger

from holdfast.core import names, rules
from holdfast.core.directives import Directive
from holdfast.core.exceptions import HoldfastError, SessionLost
from holdfast.core.orders import Order, parse_order
from holdfast.core.sessions import Session, SessionStore
from holdfast.worker.backoff import retry_before_s
from holdfast.worker.metrics import WorkerMetrics

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
    stop_stream: Callable[[Order], bool]  # True if the stream was ours and is now stopping
    on_lost: Callable[[SessionLost], Awaitable[None]]
    mono: Callable[[], int]
    # Rebalancing: our load (sum of weights) for the item, and what each heartbeat read back
    # (the target and drain flag, ``holdfast.core.directives``).
    load: Callable[[], float] | None = None
    on_beat: Callable[[Directive | None, bool], None] | None = None
    fence_mono_ms: int = 0
    last_ok_mono_ms: int | None = None
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    # Two threads: an attempt abandoned at the fence may still be waiting on its socket, and
    # the next incarnation's first heartbeat must not queue behind it.
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=2, thread_name_prefix="holdfast-session"))
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
            # The next one is a period after the attempt that landed: a heartbeat that needed
            # retries (throttled) is not followed at once by another one.
            anchor = max(started, self.last_ok_mono_ms or started)
            elapsed_s = (self.mono() - anchor) / 1000
            await self.sleep(max(0.0, self.timing.heartbeat_ms / 1000 - elapsed_s))

    async def heartbeat(self) -> None:
        """Renew once, retrying until it lands, the session is lost, or the fence passes."""
        failures = 0
        while True:
            sent = self.mono()
            session = self.session
            if sent >= self.fence_mono_ms and failures:
                # Retried up to the fence: the fence watcher stops every stream now (fenced,
                # with a best-effort release); the next heartbeat, a period on, ends the
                # incarnation (as it did before heartbeats were retried).
                await self.sleep(self.timing.heartbeat_ms / 1000)
                return
            if sent >= self.fence_mono_ms:
                # Past the fence (paused, or DynamoDB silent too long): every stream has
                # stopped without a release we can trust, so this incarnation must never be
                # renewed again; a new one reaps it once its TTL has passed.
                logger.error("session fenced: no heartbeat landed in time", owner=session.owner,
                             late_ms=sent - self.fence_mono_ms, attempts=failures)
                await self.on_lost(SessionLost(session.worker_id, session.incarnation,
                                               "fenced: not renewed within TTL - skew - margin"))
                return
            try:
                # asyncio.timeout, not wait_for: in 3.11 wait_for swallows a cancellation that
                # lands as the call completes (gh-86296), and the stop then waits on this loop
                # for ever (seen once: a SIGTERMed worker heartbeating its ENDED session).
                async with asyncio.timeout((self.fence_mono_ms - sent) / 1000):
                    beat = await asyncio.get_running_loop().run_in_executor(
                        self.executor, functools.partial(
                            self.store.heartbeat_full, session, held=self.held(),
                            capacity=self.capacity, done=self._done,
                            load=self.load() if self.load is not None else None))
            except TimeoutError:
                failures += 1
                continue  # at the fence: handled above
            except SessionLost as lost:
                self.last_ok_mono_ms = sent
                if session is self.session:  # not already replaced by a new incarnation
                    logger.error("session lost: stopping every stream", owner=session.owner,
                                 why=lost.why)
                    await self.on_lost(lost)
                return
            except HoldfastError as exc:
                failures += 1
                self.metrics.incr(names.METRIC_SESSION_RENEW_FAILURES)
                left = self.fence_mono_ms - self.mono()
                if failures == 1 or failures % 10 == 0:
                    logger.warning("session heartbeat failed; retrying until the fence",
                                   error=str(exc)[:300], fence_in_ms=left, attempts=failures)
                if session is not self.session:
                    return
                hb_s = self.timing.heartbeat_ms / 1000
                await self.sleep(retry_before_s(failures, left, hb_s / 4, hb_s / 2, self.rand))
                continue
            if session is not self.session:  # replaced by a new incarnation meanwhile
                return
            took = self.mono() - sent
            self.metrics.renew_latency(took)
            if took > self.timing.heartbeat_ms:
                logger.warning("slow session heartbeat", took_ms=took)
            self.session = beat.session
            self.last_ok_mono_ms = sent
            self.fence_mono_ms = max(self.fence_mono_ms,
                                     rules.fence_deadline_mono_ms(sent, self.timing))
            self._done = self._act_on(beat.orders)
            if self.on_beat is not None:
                self.on_beat(beat.directive, beat.draining)
            return

    def _act_on(self, orders: frozenset[str]) -> frozenset[str]:
        """Carry out every order once; all of them are acknowledged with the next heartbeat."""
        for order in sorted(orders - self._done):
            parsed = parse_order(order)
            if parsed is None:
                logger.warning("unknown order ignored", order=order[:200])
                continue
            acted = self.stop_stream(parsed)
            logger.info("order", verb=parsed.verb, conn_id=parsed.conn_id, epoch=parsed.epoch,
                        held=acted, via="session")
        return orders
