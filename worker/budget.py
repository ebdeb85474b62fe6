"""The reconnect budget: a token bucket, shared out over the fleet, with jitter.

Upstreams limit how fast clients may connect. A big rebalance or a mass failover would
otherwise open thousands of connections in the same second, so every upstream connect (the
first one of a claimed stream and every reconnect) takes a token first.

The budget is fleet-wide (``HOLDFAST_CONNECT_RATE`` connects per second, ``HOLDFAST_CONNECT_
BURST`` at once) with no coordination: each worker takes ``1 / fleet`` of it, where ``fleet``
is the number of live workers it last heard of (the decider's directive, or its own sweep of
the session table). A worker that has not heard yet assumes it is alone: the fleet may go over
the budget for a moment after a scale-out, never under it for long. A connect that has to wait
also waits a random part of one token's interval, so workers that ran dry together do not
all retry on the same tick.

``TokenBucket`` is the rule (no clock inside: ``now`` is a parameter); ``ConnectBudget`` the
asyncio side. aiolimiter was considered: it reads the loop's clock itself and cannot be
re-rated as the fleet changes size, and the rule is a dozen lines.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["ConnectBudget", "TokenBucket"]


@dataclass
class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; rate 0: no limit."""

    rate: float
    burst: float
    tokens: float = 0.0
    at_s: float | None = None  # None: not used yet (full at first use)

    def take(self, now_s: float) -> float:
        """Take one token at ``now_s``; how many seconds to wait before using it (0: now)."""
        if self.rate <= 0:
            return 0.0
        if self.at_s is None:
            self.tokens, self.at_s = max(1.0, self.burst), now_s
        elapsed = max(0.0, now_s - self.at_s)
        self.tokens = min(max(1.0, self.burst), self.tokens + elapsed * self.rate)
        self.at_s = now_s
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def rerate(self, rate: float, burst: float) -> None:
        """A new share of the budget; tokens saved up beyond the new burst are dropped."""
        self.rate, self.burst = rate, burst
        self.tokens = min(self.tokens, max(1.0, burst))


@dataclass
class ConnectBudget:
    """This worker's share of the fleet's connect budget; ``await budget.admit()`` per connect."""

    fleet_rate: float
    fleet_burst: float
    fleet: int = 1
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    bucket: TokenBucket = field(init=False)

    def __post_init__(self) -> None:
        self.bucket = TokenBucket(*self._share())

    def _share(self) -> tuple[float, float]:
        n = max(1, self.fleet)
        return self.fleet_rate / n, max(1.0, self.fleet_burst / n)

    def set_fleet(self, fleet: int) -> None:
        """The fleet now has ``fleet`` live workers (ignored if not positive or unchanged)."""
        if fleet > 0 and fleet != self.fleet:
            self.fleet = fleet
            self.bucket.rerate(*self._share())

    async def admit(self) -> float:
        """Wait for a token (plus jitter when waiting at all); the seconds waited."""
        wait = self.bucket.take(self.clock())
        if wait <= 0:
            return 0.0
        wait += self.rand() / max(self.bucket.rate, 1e-9)
        await self.sleep(wait)
        return wait
