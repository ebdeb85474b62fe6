"""The session heartbeat: on its own thread, bounded by the fence, retried until it lands or
the fence passes, and renewed only while the event loop is alive."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from holdfast.core import aws, names, rules
from holdfast.core.exceptions import SessionLost, StoreUnavailable
from holdfast.core.orders import Order
from holdfast.core.sessions import Beat, Session
from holdfast.worker.beatrules import loop_bound_ms, publish_ms
from holdfast.worker.held import monotonic_ms
from holdfast.worker.loopclock import LoopClock
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.session import SessionKeeper
from tests.worker.conftest import async_wait_until


@pytest.fixture(autouse=True)
def _no_throttle_seen() -> Iterator[None]:
    """Each test starts with no throttled call noted by this process (a module-level mark)."""
    aws._THROTTLED_AT_S.clear()
    yield
    aws._THROTTLED_AT_S.clear()


TIMING = rules.LeaseTiming(lease_ms=4000, heartbeat_ms=1000, skew_ms=500, margin_ms=400)
FAST = rules.LeaseTiming(lease_ms=800, heartbeat_ms=100, skew_ms=100, margin_ms=80)


class Store:
    """A session store whose first ``fail`` heartbeats are throttled; each takes ``hang_s``."""

    def __init__(self, fail: int = 0, hang_s: float = 0.0,
                 orders: frozenset[str] = frozenset()) -> None:
        self.fail, self.hang_s, self.calls, self.orders = fail, hang_s, 0, orders
        self.at: list[int] = []  # when each call was made (mono ms)
        self.acked: list[frozenset[str]] = []

    def heartbeat_full(self, session: Session, *, done: frozenset[str] = frozenset(),
                       **_: Any) -> Beat:
        self.calls += 1
        self.at.append(monotonic_ms())
        self.acked.append(done)
        time.sleep(self.hang_s)
        if self.calls <= self.fail:
            raise StoreUnavailable("heartbeat", "ThrottlingException")
        return Beat(Session(session.worker_id, session.incarnation, 1), self.orders)


def _keeper(store: Store, lost: list[SessionLost], timing: rules.LeaseTiming = TIMING,
            stopped: list[Order] | None = None) -> SessionKeeper:
    async def on_lost(exc: SessionLost) -> None:
        lost.append(exc)

    def stop_stream(order: Order) -> bool:
        if stopped is not None:
            stopped.append(order)
        return True

    keeper = SessionKeeper(store, Session("w1", "i1", 0), timing, WorkerMetrics(),  # type: ignore[arg-type]
                           held=lambda: 0, capacity=4, stop_stream=stop_stream,
                           on_lost=on_lost, mono=monotonic_ms,
                           clock=LoopClock(monotonic_ms, publish_ms(timing)))
    keeper.started(keeper.session, monotonic_ms())
    return keeper


async def _beat(keeper: SessionKeeper) -> None:
    """One heartbeat on a thread, as the keep-alive makes it; then the loop's share runs."""
    keeper._loop = asyncio.get_running_loop()
    await asyncio.to_thread(keeper.beat)
    await asyncio.sleep(0.01)


async def test_a_throttled_heartbeat_is_retried_before_the_fence(
        caplog: pytest.LogCaptureFixture) -> None:
    """Three throttled attempts, then one lands: the fence moves, nothing is lost; each
    failure is counted, and the line says how long after the last renewal it was sent."""
    lost: list[SessionLost] = []
    store = Store(fail=3)
    keeper = _keeper(store, lost)
    keeper.rand = lambda: 0.0  # the jitter's shortest draws: 0.6 s of pauses, not up to 1.25
    keeper.started(keeper.session, monotonic_ms() - 500)  # the last renewal: 0.5 s ago
    before = keeper.fence_mono_ms
    sent = monotonic_ms()
    await _beat(keeper)
    assert store.calls == 4 and not lost
    assert keeper.fence_mono_ms >= sent + TIMING.usable_ms > before
    # Short pauses (0.1-0.5 s), not a heartbeat period each.
    assert monotonic_ms() - sent < 1.5 * TIMING.heartbeat_ms
    assert keeper.metrics.totals[names.METRIC_SESSION_RENEW_FAILURES] == 3
    failed = [r for r in caplog.records if "retrying until the fence" in r.getMessage()]
    assert failed and getattr(failed[0], "since_renewed_ms", None) is not None


async def test_a_hanging_heartbeat_is_cut_off_at_the_fence(
        caplog: pytest.LogCaptureFixture) -> None:
    """A call that would answer after the fence is abandoned at the fence, said so with how
    long it hung and how long after the last renewal it was sent: the session fences."""
    lost: list[SessionLost] = []
    keeper = _keeper(Store(hang_s=2.0), lost)
    keeper.fence_mono_ms = monotonic_ms() + 300
    t0 = time.monotonic()
    await _beat(keeper)
    assert time.monotonic() - t0 < 2.0
    cut = [r for r in caplog.records if "cut off at the fence" in r.getMessage()]
    assert len(cut) == 1 and 250 <= getattr(cut[0], "in_flight_ms", -1) < 2000
    assert getattr(cut[0], "since_renewed_ms", None) is not None  # sent late, or hung?
    assert keeper.metrics.totals[names.METRIC_SESSION_RENEW_FAILURES] == 1  # a failed one too
    assert not lost  # the fence watcher stops the streams first (fenced, not lost)
    await _beat(keeper)  # the next heartbeat, past the fence, ends the incarnation
    assert len(lost) == 1 and "fenced" in lost[0].why
    await _beat(keeper)  # told once: the loop is starting a new incarnation
    assert len(lost) == 1
    keeper.executor.shutdown(wait=False)


async def test_orders_are_carried_out_on_the_loop_and_acknowledged_next_beat() -> None:
    """An order read by the keep-alive thread is carried out on the loop, once, then acked."""
    lost: list[SessionLost] = []
    stopped: list[Order] = []
    store = Store(orders=frozenset({"stop:c1"}))
    keeper = _keeper(store, lost, stopped=stopped)
    await _beat(keeper)
    await _beat(keeper)
    assert [o.conn_id for o in stopped] == ["c1"]  # carried out once
    assert store.acked == [frozenset(), frozenset({"stop:c1"})]


async def test_the_heartbeat_keeps_time_while_the_loop_is_blocked() -> None:
    """The loop blocked for 0.6 s (6 periods): heartbeats go on and the fence keeps moving."""
    lost: list[SessionLost] = []
    store = Store()
    keeper = _keeper(store, lost, FAST)
    task = asyncio.create_task(keeper.run())
    await asyncio.sleep(0.15)
    blocked_at = monotonic_ms()
    time.sleep(0.6)  # noqa: ASYNC251 -- a handler blocking the loop, on purpose
    fence_after_block = keeper.fence_mono_ms
    during = [t for t in store.at if blocked_at < t < blocked_at + 600]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(during) >= 4 and not lost
    # usable window 520 ms: the fence set before the block would have passed by now.
    assert fence_after_block > blocked_at + 600
    keeper.executor.shutdown(wait=False)


async def test_heartbeats_begin_before_run_and_go_on_after_a_restart() -> None:
    """``begin`` (the session's start) beats at once, before ``run``; ``run`` adds no second
    thread; a ``run`` ended and started again (a crash its guard restarts) while its thread is
    in a beat goes on beating, with one keep-alive thread."""
    lost: list[SessionLost] = []
    store = Store(hang_s=0.06)  # a thread is mostly inside a call
    keeper = _keeper(store, lost, FAST)
    keeper.begin()
    # Waited for, not slept on: the first beat needs two new threads to get the GIL (249 ms
    # beside four busy processes).
    await async_wait_until(lambda: store.calls >= 1, 5, "a beat before any run")
    thread = keeper._thread
    task = asyncio.create_task(keeper.run())
    await asyncio.sleep(0.05)
    assert keeper._thread is thread
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    task = asyncio.create_task(keeper.run())  # restarted at once
    await asyncio.sleep(0.05)
    calls = store.calls
    await async_wait_until(lambda: store.calls >= calls + 2, 5, "beats after the restart")
    assert not lost
    assert thread is not None
    await asyncio.to_thread(thread.join, 2)
    assert not thread.is_alive()  # one keep-alive: the old one ended
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    keeper.executor.shutdown(wait=False)


async def test_a_loop_silent_past_the_bound_is_no_longer_renewed() -> None:
    """No publish for longer than the bound: the keep-alive stops renewing, the fence passes."""
    lost: list[SessionLost] = []
    store = Store()
    keeper = _keeper(store, lost, FAST)
    keeper._loop = asyncio.get_running_loop()
    keeper.clock.stamp_ms = monotonic_ms() - loop_bound_ms(FAST) - 1
    fence = keeper.fence_mono_ms
    await _beat(keeper)
    assert store.calls == 0 and keeper.fence_mono_ms == fence
    keeper.publish()  # the loop is back
    await _beat(keeper)
    assert store.calls == 1 and keeper.fence_mono_ms > fence
    keeper.executor.shutdown(wait=False)


async def test_a_lost_session_is_reported_to_the_loop() -> None:
    """SessionLost from the store: the loop's on_lost runs with the reason."""
    lost: list[SessionLost] = []

    class Lost(Store):
        def heartbeat_full(self, session: Session, **_: Any) -> Beat:
            raise SessionLost(session.worker_id, session.incarnation, "session is DEAD")

    keeper = _keeper(Lost(), lost)
    await _beat(keeper)
    assert len(lost) == 1 and "DEAD" in lost[0].why
    keeper.executor.shutdown(wait=False)


async def test_a_heartbeat_that_meets_our_own_goodbye_is_no_loss() -> None:
    """The worker stopped the keeper and ended its session while a heartbeat was in flight:
    that heartbeat finding the session ENDED reports nothing (no error, no lost session)."""
    lost: list[SessionLost] = []
    keeper: SessionKeeper | None = None

    class Ended(Store):
        def heartbeat_full(self, session: Session, **_: Any) -> Beat:
            assert keeper is not None
            keeper.stop()  # the goodbye is written meanwhile
            raise SessionLost(session.worker_id, session.incarnation, "session is ENDED")

    keeper = _keeper(Ended(), lost)
    await _beat(keeper)
    assert lost == []
    keeper.executor.shutdown(wait=False)


async def test_a_heartbeat_whose_call_the_stop_cancelled_ends_quietly() -> None:
    """The worker's stop shut the heartbeat's executor down with the call still queued: the
    beat returns, nothing escapes the keep-alive thread and no session is reported lost."""
    lost: list[SessionLost] = []
    keeper = _keeper(Store(), lost)
    keeper.executor.shutdown(wait=True)
    keeper.executor = ThreadPoolExecutor(max_workers=1)
    busy = threading.Event()
    keeper.executor.submit(busy.wait, 5)  # the heartbeat's call waits behind it
    errors: list[BaseException] = []

    def keep_alive() -> None:
        try:
            keeper.beat()
        except BaseException as exc:  # what would escape the thread
            errors.append(exc)

    thread = threading.Thread(target=keep_alive)
    thread.start()
    await asyncio.sleep(0.1)
    keeper.stop()
    keeper.executor.shutdown(wait=False, cancel_futures=True)
    busy.set()
    thread.join(5)
    assert not thread.is_alive() and errors == [] and lost == []


async def test_the_period_halves_for_a_ttl_after_a_failed_attempt() -> None:
    """Throttled once: heartbeats every half period for two periods, then every period again."""
    now = [10_000]
    keeper = _keeper(Store(fail=1), [])
    keeper.mono = lambda: now[0]
    keeper.started(keeper.session, now[0])
    keeper._stop.wait = lambda timeout=None: False  # type: ignore[method-assign]
    assert keeper.period_ms() == TIMING.heartbeat_ms
    await _beat(keeper)  # one throttled attempt, then one that lands
    assert keeper.period_ms() == rules.throttled_heartbeat_ms(TIMING) == TIMING.heartbeat_ms // 2
    now[0] += 2 * TIMING.heartbeat_ms
    assert keeper.period_ms() == TIMING.heartbeat_ms
    keeper.executor.shutdown(wait=False)



async def test_a_heartbeat_that_crashes_is_said_and_beaten_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """An error no rule names (a bug) escapes a heartbeat: it is logged with its traceback and
    the keep-alive thread beats again, renewing the session, instead of dying silently."""
    lost: list[SessionLost] = []

    class Crashes(Store):
        def heartbeat_full(self, session: Session, **kwargs: Any) -> Beat:
            if not self.calls:
                self.calls += 1
                raise KeyError("expires_at_ms")
            return super().heartbeat_full(session, **kwargs)

    store = Crashes()
    keeper = _keeper(store, lost, FAST)
    fence = keeper.fence_mono_ms
    keeper.begin()
    await asyncio.sleep(0.3)  # three periods
    keeper.stop()
    assert store.calls >= 2 and keeper.fence_mono_ms > fence and not lost
    crashed = [r for r in caplog.records if r.getMessage().startswith("session heartbeat crashed")]
    assert len(crashed) == 1 and crashed[0].exc_info is not None
    keeper.executor.shutdown(wait=False)


async def test_a_lost_session_whose_handling_fails_is_said(
        caplog: pytest.LogCaptureFixture) -> None:
    """The loop's handling of a lost session raises (nobody awaits its task): the error is
    logged at once, not left in a task nobody looks at."""

    class Lost(Store):
        def heartbeat_full(self, session: Session, **_: Any) -> Beat:
            raise SessionLost(session.worker_id, session.incarnation, "session is DEAD")

    keeper = _keeper(Lost(), [])

    async def failing(lost: SessionLost) -> None:
        raise RuntimeError("no new session")

    keeper.on_lost = failing
    await _beat(keeper)
    said = [r for r in caplog.records if r.getMessage() == "handling the lost session failed"]
    assert len(said) == 1 and said[0].levelname == "ERROR"
    assert "RuntimeError: no new session" in getattr(said[0], "error", "")
    keeper.executor.shutdown(wait=False)
