"""Back-off policy as pure functions: reconnect delays, when to give up, when to retry later.

"Full jitter" (a uniform draw up to the exponential cap) spreads the reconnects of thousands of
streams that lost one upstream at the same instant; the random source is a parameter.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from holdfast.core import settings as S
from holdfast.core.settings import GIVE_UP_RETRY_CAP_S

__all__ = [
    "Backoff",
    "Drops",
    "claim_retry_s",
    "errors_before",
    "jittered",
    "retry_before_s",
    "unanswered_write_retry_s",
]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Reconnect after ``failures`` consecutive failures; give up after ``max_failures``."""

    # The defaults are the settings' (``holdfast.core.settings``), the one place they are said.
    base_s: float = S.RECONNECT_BASE_SECONDS.read({})
    cap_s: float = S.RECONNECT_CAP_SECONDS.read({})
    max_failures: int = S.UPSTREAM_MAX_FAILURES.read({})
    # After a give-up the lease is unclaimable for retry_base_s * 2**(error_count-1), capped.
    retry_base_s: float = S.RETRY_BASE_SECONDS.read({})
    retry_cap_s: float = GIVE_UP_RETRY_CAP_S
    # Doublings of the reconnect delay for connections that delivered but did not stay up
    # (``Drops.short``): 0.5, 1, 2, 4 s at the default base. 3 cuts an upstream that delivers
    # one message a connection from 2-4 connects a second per stream to one every 2-4 s, and
    # keeps the wait of one that rotates its connections every few seconds (after many
    # messages, resumed without loss) within about one rotation, well under the 30 s cap.
    short_doublings: int = 3

    def delay_s(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before reconnect attempt number ``failures`` + 1 (``failures`` >= 1)."""
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(60, max(0, failures - 1)))
        return ceiling * (0.5 + 0.5 * rand())  # half fixed, half jitter: never a tight spin

    def reconnect_s(self, drops: Drops, rand: Callable[[], float] = random.random) -> float:
        """Seconds before the next reconnect: ``delay_s`` of the larger of the two counts."""
        return self.delay_s(max(drops.failures, min(drops.short, self.short_doublings + 1)), rand)

    def give_up(self, failures: int) -> bool:
        """True when the stream should be handed back with the error recorded."""
        return failures >= self.max_failures

    def retry_after_s(self, error_count: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds the lease stays unclaimable after give-up number ``error_count`` (>= 1)."""
        ceiling = min(self.retry_cap_s, self.retry_base_s * 2.0 ** min(60, max(0, error_count - 1)))
        return ceiling * (0.75 + 0.25 * rand())


@dataclass(frozen=True, slots=True)
class Drops:
    """A stream's drops in a row, counted twice: for its give-up and for its reconnect delay."""

    # Without progress: the give-up count. A connection that moved the checkpoint resets it (a
    # stream that delivers is never given up), as does one that stayed up.
    failures: int = 0
    # Of connections that did not stay up: the delay's growth (``Backoff.short_doublings``).
    # Only one that stayed up resets it: an upstream that sent one new message and closed,
    # every time, was reconnected at the base delay for ever, a storm with many streams.
    short: int = 0

    def after(self, progressed: bool, stable: bool) -> Drops:
        """The counts after one more drop of a connection that ``progressed``, or was ``stable``."""
        return Drops(1 if progressed or stable else self.failures + 1,
                     0 if stable else self.short + 1)


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


def unanswered_write_retry_s(attempt: int) -> float:
    """Pause before retrying, for the ``attempt``-th time (from 0), a holding's last write
    DynamoDB did not answer (a release, a give-back): 0.2 s longer each time, at most 1 s (the
    fence or the give-back's minute bounds how long); the one rule of both."""
    return 0.2 * min(max(0, attempt) + 1, 5)


def claim_retry_s(receives: int, base_s: float = 2.0, cap_s: float = 4.0,
                  rand: Callable[[], float] = random.random) -> int:
    """Whole seconds (SQS visibility) before a nudge whose claim met an unavailable DynamoDB
    comes back, after its ``receives``-th delivery: doubling from ``base_s`` to ``cap_s``, full
    jitter above one second, so a throttled fleet's refused claims neither spin nor return
    in one herd when DynamoDB recovers."""
    ceiling = min(cap_s, base_s * 2.0 ** min(60, max(0, receives - 1)))
    return max(1, round(1 + (ceiling - 1) * rand()))
