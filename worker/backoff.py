"""Back-off policy as pure functions: reconnect delays, when to give up, when to retry later.

"Full jitter" (a uniform draw up to the exponential cap) spreads the reconnects of thousands of
streams that lost one upstream at the same instant; the random source is a parameter.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Backoff", "jittered"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Reconnect after ``failures`` consecutive failures; give up after ``max_failures``."""

    base_s: float = 0.5
    cap_s: float = 30.0
    max_failures: int = 6
    # After a give-up the lease is unclaimable for retry_base_s * 2**(error_count-1), capped.
    retry_base_s: float = 30.0
    retry_cap_s: float = 900.0

    def delay_s(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before reconnect attempt number ``failures`` + 1 (``failures`` >= 1)."""
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(60, max(0, failures - 1)))
        return ceiling * (0.5 + 0.5 * rand())  # half fixed, half jitter: never a tight spin

    def give_up(self, failures: int) -> bool:
        """True when the stream should be handed back with the error recorded."""
        return failures >= self.max_failures

    def retry_after_s(self, error_count: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds the lease stays unclaimable after give-up number ``error_count`` (>= 1)."""
        ceiling = min(self.retry_cap_s, self.retry_base_s * 2.0 ** min(60, max(0, error_count - 1)))
        return ceiling * (0.75 + 0.25 * rand())


def jittered(period_s: float, rand: Callable[[], float] = random.random,
             spread: float = 0.5) -> float:
    """``period_s`` +/- ``spread``/2 of itself, so a fleet's periodic work does not line up."""
    return period_s * (1.0 - spread / 2 + spread * rand())
