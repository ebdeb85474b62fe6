"""The event loop's own clock: one stamp, written on the loop, read from any thread.

Four readers judge the loop by it: the session keep-alive thread (stop renewing when the loop
has been silent past ``loop_bound_ms``), the claim admission (take nothing more while the loop
lags past ``CLAIM_LAG_LIMIT_MS``), the watchdog thread (end the process when the loop is stuck
past a fence) and ``/health``. They used to keep three stamps on three timers, which could
disagree about the same stall; now the session keeper's loop task is the one writer
(``SessionKeeper.run``) and everyone reads this.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from holdfast.worker.held import monotonic_ms

__all__ = ["LoopClock"]


@dataclass
class LoopClock:
    """``stamp`` is called on the loop every ``tick_ms``; ``lag_ms`` is how overdue the next
    stamp is (0 while the loop keeps time), ``silent_ms`` how long since the last one."""

    mono: Callable[[], int] = monotonic_ms
    tick_ms: int = 250
    # A plain int store: read by other threads without a lock (atomic under the GIL).
    stamp_ms: int = field(default=-1)
    loop_thread: int | None = None  # the stamping thread: where the watchdog looks when stuck

    def __post_init__(self) -> None:
        if self.stamp_ms < 0:
            self.stamp_ms = self.mono()

    def stamp(self) -> None:
        """The loop is alive now (called on the loop)."""
        self.loop_thread = threading.get_ident()
        self.stamp_ms = self.mono()

    def silent_ms(self) -> int:
        return max(0, self.mono() - self.stamp_ms)

    def lag_ms(self) -> int:
        return max(0, self.silent_ms() - self.tick_ms)
