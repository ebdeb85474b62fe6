"""Back-off policy as pure functions: reconnect delays, when to give up, when to retry later.

"Full jitter" (a uniform draw up to the exponential cap) spreads the reconnects of thousands of
streams that lost one upstream at the same instant; the random source is a parameter.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from holdfast.core.settings import GIVE_UP_RETRY_CAP_S

__all__ = ["Backoff", "claim_retry_s", "errors_before", "jittered", "nudge_again_in_s",
           "retry_before_s"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Reconnect after ``failures`` consecutive failures; give up after ``max_failures``."""

    base_s: float = 0.5
    cap_s: float = 30.0
    max_failures: int = 6
    # After a give-up the lease is unclaimable for retry_base_s * 2**(error_count-1), capped.
    retry_base_s: float = 30.0
    retry_cap_s: float = GIVE_UP_RETRY_CAP_S

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


def errors_before(error_count: int, handled: int) -> int:
    """The give-ups in a row before this one, for its back-off (``Backoff.retry_after_s`` of one
    more): the item's ``error_count``, or 0 if this holding handled a message first. A stream
    that delivers between its failures (a flaky downstream, an upstream that drops now and
    then) starts again from the base delay instead of doubling up to the cap; one that fails
    on the same message every time keeps doubling."""
    return error_count if handled == 0 else 0


def jittered(period_s: float, rand: Callable[[], float] = random.random,
             spread: float = 0.5) -> float:
    """``period_s`` +/- ``spread``/2 of itself, so a fleet's periodic work does not line up."""
    return period_s * (1.0 - spread / 2 + spread * rand())


def retry_before_s(failures: int, left_ms: int, base_s: float, cap_s: float,
                   rand: Callable[[], float] = random.random) -> float:
    """Pause before retry ``failures`` + 1 of a call that must land within ``left_ms``.

    Exponential from ``base_s`` to ``cap_s`` with half of it jittered (a throttled fleet must
    not retry in step), and never past the deadline: the last retry still goes out before it.
    """
    return max(0.0, min(Backoff(base_s, cap_s).delay_s(failures, rand), left_ms / 1000 / 2))


def claim_retry_s(receives: int, base_s: float = 2.0, cap_s: float = 4.0,
                  rand: Callable[[], float] = random.random) -> int:
    """Whole seconds (SQS visibility) before a nudge whose claim met an unavailable DynamoDB
    comes back, after its ``receives``-th delivery: doubling from ``base_s`` to ``cap_s``, full
    jitter above one second, so a throttled fleet's refused claims neither spin nor return
    in one herd when DynamoDB recovers."""
    ceiling = min(cap_s, base_s * 2.0 ** min(60, max(0, receives - 1)))
    return max(1, round(1 + (ceiling - 1) * rand()))


def nudge_again_in_s(wait_ms: int, max_delay_s: int) -> int | None:
    """Whole seconds (SQS visibility) before the nudge of a stream refused for its back-off
    comes back, the back-off ending ``wait_ms`` from now: rounded up, plus a second for clock
    jitter; at least a second, when the refusal's answer came after the back-off ended (a
    deleted nudge then left the stream to the sweep); None past ``max_delay_s`` (the sweep
    finds it then)."""
    seconds = -(-wait_ms // 1000) + 1
    return max(1, seconds) if seconds <= max_delay_s else None
