"""The loop's one clock: stamped on the loop, read by the keep-alive thread, watchdog, /health."""

from __future__ import annotations

import threading

from holdfast.worker.loopclock import LoopClock


def test_lag_is_how_overdue_the_next_stamp_is() -> None:
    """On time: no lag; a stamp 2 s overdue is 2 s of lag; silence counts from the last stamp."""
    now = [50_000]
    clock = LoopClock(lambda: now[0], tick_ms=250)
    assert clock.stamp_ms == 50_000  # a new clock counts as stamped now
    now[0] += 200
    assert clock.lag_ms() == 0 and clock.silent_ms() == 200
    now[0] += 2_050
    assert clock.lag_ms() == 2_000 and clock.silent_ms() == 2_250
    clock.stamp()
    assert clock.lag_ms() == 0 and clock.loop_thread == threading.get_ident()
