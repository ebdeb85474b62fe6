"""The worker's session: one heartbeat per worker keeps every stream it holds.

The heartbeat runs on a thread of its own with a DynamoDB client of its own (the keep-alive),
not on the event loop: a loop busy with a claim storm, a burst of reconnects or slow handlers
stamped heartbeats late by up to 6.8 s and the worker fenced itself while healthy. The loop
only publishes, a few times a second, that it is alive and what it holds (``publish``); the
keep-alive renews while that stamp is recent (``loop_bound_ms``). A loop stuck longer (a
handler blocking it, a deadlock) stops being renewed: its fence passes and the watchdog
(``worker.watchdog``) ends the process, so a stuck loop cannot strand its streams.

Each heartbeat is one conditional write of the session item (its incarnation, ALIVE). Outcomes:

- renewed: the session fence moves to ``sent + TTL - skew - margin`` (monotonic) for every
  stream at once, from the keep-alive thread (one int store: every stream's deadline reads it);
  orders waiting in the item (``stop:<id>``) and the balancing directive are handed to the loop,
  which carries the orders out; they are acknowledged with the next heartbeat;
- ``SessionLost`` (the sweeper declared it DEAD after a pause, or a successor replaced it):
  the loop is told at once (``on_lost``: every stream is aborted, a new incarnation starts);
- no decisive answer (throttled, timed out): retried after a short jittered pause until it lands
  or the session fence passes. Every attempt is bounded by the time left to the fence, so one
  slow call cannot carry a renewal past it, and a throttle shorter than the usable window minus
  one heartbeat fences nothing. At the fence the streams stop (the loop's fence watcher), before
  the sweeper may declare the session dead (TTL + skew after the last renewal).

Here: the ``SessionKeeper`` (its state, the keep-alive thread, the hand-over to the loop). What
the loop then does needing none of its state (a heartbeat's orders carried out, a failed
handling of the loss said) is ``worker.beatnews``; the keep-alive's rules, ``worker.beatrules``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Logger

from holdfast.core import names, rules
from holdfast.core.directives import Directive
from holdfast.core.exceptions import HoldfastError, SessionLost
from holdfast.core.orders import Order
from holdfast.core.sessions import Beat, Session, SessionStore
from holdfast.worker.backoff import retry_before_s
from holdfast.worker.beatnews import act_on_orders
from holdfast.worker.beatrules import LoopSilence, heartbeat_period_ms, loop_bound_ms
from holdfast.worker.iothreads import logs_failure
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.loopclock import LoopClock
from holdfast.worker.metrics import WorkerMetrics

__all__ = ["SessionKeeper"]

logger = Logger(service=WORKER_LOGGER, child=True)


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
    # The loop's clock (``worker.loopclock``): ``run`` is its one writer; the keep-alive
    # thread, the claim admission, the watchdog and /health read it.
    clock: LoopClock
    # Rebalancing: our load (sum of weights) for the item, and what each heartbeat read back
    # (the target and drain flag, ``holdfast.core.directives``).
    load: Callable[[], float] | None = None
    on_beat: Callable[[Directive | None, bool], None] | None = None
    fence_mono_ms: int = 0
    last_ok_mono_ms: int | None = None
    rand: Callable[[], float] = random.random
    # Two threads: an attempt abandoned at the fence may still be waiting on its socket, and
    # the next attempt must not queue behind it.
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=2, thread_name_prefix="holdfast-session-call"))
    _snapshot: tuple[int, float | None] = (0, None)
    _done: frozenset[str] = frozenset()
    _loop: asyncio.AbstractEventLoop | None = None
    _given_up: Session | None = None  # the incarnation the loop was told is over
    _silence: LoopSilence = field(default_factory=LoopSilence)
    _failed_mono_ms: int | None = None  # the last failed attempt (``period_ms``)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lost_task: asyncio.Future[None] | None = None
    _thread: threading.Thread | None = None  # the keep-alive thread (``begin``)
    _generation: int = 0  # of the keep-alive thread that may beat

    def started(self, session: Session, sent_mono_ms: int) -> None:
        """A new incarnation was written at ``sent_mono_ms`` (on the loop)."""
        with self._lock:
            self.session = session
            self._done = frozenset()
            self.fence_mono_ms = rules.fence_deadline_mono_ms(sent_mono_ms, self.timing)
            self.last_ok_mono_ms = sent_mono_ms
        self.publish()

    def publish(self, *, snapshot: bool = True) -> None:
        """The loop is alive now (called on the loop); with ``snapshot``, holding this much."""
        if snapshot:
            self._snapshot = (self.held(), self.load() if self.load is not None else None)
        self.clock.stamp()

    def begin(self) -> None:
        """Start the keep-alive thread now (on the loop) unless it runs: at the session's
        start, before the rest of the worker's start; ``run`` then stamps the loop."""
        self._loop = asyncio.get_running_loop()
        running = self._thread is not None and self._thread.is_alive()
        if running and not self._stop.is_set():
            return
        # None yet, or one told to stop (``run`` ended: a crash its guard restarts) that may
        # still be in its last beat: a new one, and the old one ends after that beat (one
        # keep-alive at a time: each is a write per period).
        self._generation += 1
        self._stop.clear()
        self.publish()
        self._thread = threading.Thread(target=self.keep_alive, args=(self._generation,),
                                        name="holdfast-session", daemon=True)
        self._thread.start()

    async def run(self) -> None:
        """Run the keep-alive thread (``begin``) and publish the loop's stamp until
        cancelled."""
        self.begin()
        try:
            ticks = 0
            while True:
                await asyncio.sleep(self.clock.tick_ms / 1000)
                # The load sums every stream's weight (5,000 at a time): once per half period
                # is enough for the heartbeat; the stamp itself is cheap.
                ticks += 1
                self.publish(snapshot=ticks % 2 == 0)
        finally:
            self._stop.set()

    def stop(self) -> None:
        """No more heartbeats: the worker is about to end its session itself (a heartbeat
        that then finds it ENDED is not a loss)."""
        self._stop.set()

    # -- the keep-alive thread --------------------------------------------------------------------
    def keep_alive(self, generation: int) -> None:
        """Heartbeat every period until ``run`` ends or a newer keep-alive began (the thread's
        body)."""
        while not self._stop.is_set() and generation == self._generation:
            started = self.mono()
            try:
                self.beat()
            except Exception:
                # A bug, or an error no rule above names: said, and beaten again (sooner, as
                # after a refusal). If it goes on, nothing lands, the fence passes and the next
                # beat ends the incarnation, as for any other failure: never a thread that died
                # with the session still counting on it.
                self._failed_mono_ms = self.mono()
                logger.exception("session heartbeat crashed; beating again",
                                 owner=self.session.owner)
            # The next one is a period after the attempt that landed: a heartbeat that needed
            # retries (throttled) is not followed at once by another one.
            anchor = max(started, self.last_ok_mono_ms or started)
            self._stop.wait(max(0.0, (self.period_ms() - (self.mono() - anchor)) / 1000))

    def period_ms(self) -> int:
        """The heartbeat period now (``worker.beatrules.heartbeat_period_ms``)."""
        return heartbeat_period_ms(self.timing, self.mono, self._failed_mono_ms)

    def beat(self) -> None:
        """Renew once, retrying until it lands, the session is lost, or the fence passes."""
        failures = 0
        hb_s = self.timing.heartbeat_ms / 1000
        while not self._stop.is_set():
            sent = self.mono()
            with self._lock:
                session, fence = self.session, self.fence_mono_ms
            if session is self._given_up:
                return  # the loop is starting a new incarnation
            if sent >= fence:
                if failures:
                    # Retried up to the fence: the fence watcher stops every stream now
                    # (fenced, with a best-effort release); the next heartbeat, a period on,
                    # ends the incarnation.
                    self._stop.wait(hb_s)
                    return
                # Past the fence (paused, loop stuck, or DynamoDB silent too long): every stream
                # has stopped without a release we can trust, so this incarnation must never be
                # renewed again; a new one reaps it once its TTL has passed.
                logger.error("session fenced: no heartbeat landed in time", owner=session.owner,
                             late_ms=sent - fence, since_renewed_ms=self._since_renewed(sent))
                self._lost(session, SessionLost(session.worker_id, session.incarnation,
                                                "fenced: not renewed within TTL - skew - margin"))
                return
            if self._silence.stuck(sent, self.clock.stamp_ms, loop_bound_ms(self.timing),
                                   self.fence_mono_ms):
                return  # not renewed: the fence passes, the watchdog ends the process
            held, load = self._snapshot
            call = self.executor.submit(self.store.heartbeat_full, session, held=held,
                                        capacity=self.capacity, done=self._done, load=load)
            try:
                beat = call.result(timeout=(fence - sent) / 1000)
            except concurrent.futures.CancelledError:
                return  # still queued when the worker's stop shut the executor down: its end
            except concurrent.futures.TimeoutError:
                failures += 1
                self._failed_mono_ms = self.mono()
                self._on_loop(self.metrics.incr, names.METRIC_SESSION_RENEW_FAILURES)
                # Said apart from the fence's own line: an attempt that hung (no answer, no
                # error, no timeout of its own) is not a run of refused ones.
                logger.error("session heartbeat cut off at the fence: no answer",
                             owner=session.owner, in_flight_ms=self._failed_mono_ms - sent,
                             attempts=failures, since_renewed_ms=self._since_renewed(sent))
                continue  # at the fence: handled above
            except SessionLost as lost:
                self.last_ok_mono_ms = sent
                if self._stop.is_set():
                    return  # our own goodbye landed first: nothing is lost
                logger.error("session lost: stopping every stream", owner=session.owner,
                             why=lost.why)
                self._lost(session, lost)
                return
            except HoldfastError as exc:
                failures += 1
                self._failed_mono_ms = self.mono()
                self._on_loop(self.metrics.incr, names.METRIC_SESSION_RENEW_FAILURES)
                left = fence - self.mono()
                if failures == 1 or failures % 10 == 0:
                    logger.warning("session heartbeat failed; retrying until the fence",
                                   error=str(exc)[:300], fence_in_ms=left, attempts=failures,
                                   since_renewed_ms=self._since_renewed(sent))
                # A quarter to half a period: shorter pauses would double a small worker's call
                # rate while throttled (the heartbeat is most of its calls).
                self._stop.wait(retry_before_s(failures, left, hb_s / 4, hb_s / 2, self.rand))
                continue
            self._renewed(session, beat, sent)
            return

    def _since_renewed(self, sent: int) -> int | None:
        """How long before ``sent`` the last renewal (or the start) was sent: an attempt that
        began late (the thread waited) is told apart from one that hung."""
        return None if self.last_ok_mono_ms is None else sent - self.last_ok_mono_ms

    def _renewed(self, session: Session, beat: Beat, sent: int) -> None:
        with self._lock:
            if session is not self.session:  # replaced by a new incarnation meanwhile
                return
            self.session = beat.session
            self.last_ok_mono_ms = sent
            self.fence_mono_ms = max(self.fence_mono_ms,
                                     rules.fence_deadline_mono_ms(sent, self.timing))
        took = self.mono() - sent
        if took > self.timing.heartbeat_ms:
            logger.warning("slow session heartbeat", took_ms=took)
        self._on_loop(self._apply, beat, took)

    def _lost(self, session: Session, lost: SessionLost) -> None:
        """Tell the loop, once per incarnation, that ``session`` is over."""
        with self._lock:
            if session is not self.session or self._stop.is_set():
                return  # replaced already, or the worker is stopping (its session ended)
            self._given_up = session
        self._on_loop(self._report_lost, lost)

    def _report_lost(self, lost: SessionLost) -> None:
        # Kept: the loop holds only a weak reference to a task. Nobody awaits it: its failure
        # is logged by its done-callback, never lost.
        self._lost_task = asyncio.ensure_future(self.on_lost(lost))
        self._lost_task.add_done_callback(
            logs_failure("handling the lost session", traceback=True))

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop: streams, balancing and metrics belong to it."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: the process exits
            loop.call_soon_threadsafe(fn, *args)

    # -- back on the loop (what needs none of this state: ``worker.beatnews``) ----------------
    def _apply(self, beat: Beat, took_ms: int) -> None:
        """A renewal's news, on the loop: carry out its orders, hand on its directive."""
        self.metrics.renew_latency(took_ms)
        if beat.session.incarnation != self.session.incarnation:
            return  # from an incarnation that has ended since
        self._done = act_on_orders(beat.orders, self._done, self.stop_stream)
        if self.on_beat is not None:
            self.on_beat(beat.directive, beat.draining)
