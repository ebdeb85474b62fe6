"""The session heartbeat: bounded by the fence, retried until it lands or the fence passes."""

from __future__ import annotations

import time
from typing import Any

from holdfast.core import rules
from holdfast.core.exceptions import SessionLost, StoreUnavailable
from holdfast.core.sessions import Beat, Session
from holdfast.worker.held import monotonic_ms
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.session import SessionKeeper

TIMING = rules.LeaseTiming(lease_ms=4000, heartbeat_ms=1000, skew_ms=500, margin_ms=400)


class Store:
    """A session store whose first ``fail`` heartbeats are throttled; each takes ``hang_s``."""

    def __init__(self, fail: int = 0, hang_s: float = 0.0) -> None:
        self.fail, self.hang_s, self.calls = fail, hang_s, 0

    def heartbeat_full(self, session: Session, **_: Any) -> Beat:
        self.calls += 1
        time.sleep(self.hang_s)
        if self.calls <= self.fail:
            raise StoreUnavailable("heartbeat", "ThrottlingException")
        return Beat(Session(session.worker_id, session.incarnation, 1), frozenset())


async def _no_sleep(_: float) -> None:
    return


def _keeper(store: Store, lost: list[SessionLost]) -> SessionKeeper:
    async def on_lost(exc: SessionLost) -> None:
        lost.append(exc)

    keeper = SessionKeeper(store, Session("w1", "i1", 0), TIMING, WorkerMetrics(),  # type: ignore[arg-type]
                           held=lambda: 0, capacity=4, stop_stream=lambda _: False,
                           on_lost=on_lost, mono=monotonic_ms)
    keeper.started(keeper.session, monotonic_ms())
    return keeper


async def test_a_throttled_heartbeat_is_retried_before_the_fence() -> None:
    """Three throttled attempts, then one lands: the fence moves, nothing is lost."""
    lost: list[SessionLost] = []
    store = Store(fail=3)
    keeper = _keeper(store, lost)
    keeper.started(keeper.session, monotonic_ms() - 500)  # the last renewal: 0.5 s ago
    before = keeper.fence_mono_ms
    sent = monotonic_ms()
    await keeper.heartbeat()
    assert store.calls == 4 and not lost
    assert keeper.fence_mono_ms >= sent + TIMING.usable_ms > before
    # Short pauses (0.1-0.5 s), not a heartbeat period each.
    assert monotonic_ms() - sent < 1.5 * TIMING.heartbeat_ms


async def test_a_hanging_heartbeat_is_cut_off_at_the_fence() -> None:
    """A call that would answer after the fence is abandoned at the fence: the session fences."""
    lost: list[SessionLost] = []
    keeper = _keeper(Store(hang_s=2.0), lost)
    keeper.fence_mono_ms = monotonic_ms() + 300
    keeper.sleep = _no_sleep
    t0 = time.monotonic()
    await keeper.heartbeat()
    assert time.monotonic() - t0 < 0.8
    assert not lost  # the fence watcher stops the streams first (fenced, not lost)
    await keeper.heartbeat()  # the next heartbeat, past the fence, ends the incarnation
    assert len(lost) == 1 and "fenced" in lost[0].why
    keeper.executor.shutdown(wait=False)
