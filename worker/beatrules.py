"""The session keep-alive's rules: how often the loop stamps its clock, how long the loop may be
silent before its session stops being renewed (and saying so when it is), and the heartbeat
period after refused calls.

Apart from ``worker.session``, whose ``SessionKeeper`` thread and state follow them: functions
of the lease timing and of the clocks they are given (the silence keeps one flag, to log each
change once), so each rule is tested alone, without a thread or a store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from aws_lambda_powertools import Logger

from holdfast.core import rules
from holdfast.core.aws import throttled_at_s
from holdfast.worker.logs import WORKER_LOGGER

__all__ = ["LoopSilence", "heartbeat_period_ms", "loop_bound_ms", "publish_ms",
           "throttled_mono_ms"]

logger = Logger(service=WORKER_LOGGER, child=True)


def publish_ms(timing: rules.LeaseTiming) -> int:
    """How often the loop stamps its clock: a quarter heartbeat, at most 250 ms."""
    return min(250, timing.heartbeat_ms // 4)


def loop_bound_ms(timing: rules.LeaseTiming) -> int:
    """How long the loop may go without publishing before its session stops being renewed.

    10 s (or 2 x TTL if longer): past what a busy but live loop lags (a loop more than 1 s
    behind claims nothing more, ``worker.holdings``: a 5,000-stream claim storm that lagged 9 s
    without that now stays within it), short enough that a stuck loop's streams move on within
    ``10 s + usable window`` (the watchdog ends the process at its fence). A process that stops
    as a whole (crash, SIGSTOP, a frozen VM) stops this thread too: its TTL rules."""
    return max(10_000, 2 * timing.lease_ms)


@dataclass
class LoopSilence:
    """Whether the loop has been silent (its clock not stamped) past ``bound_ms``: the
    keep-alive then renews nothing. Each change is logged once."""

    stalled: bool = False

    def stuck(self, now: int, stamp_ms: int, bound_ms: int, fence_mono_ms: int) -> bool:
        stale_ms = max(0, now - stamp_ms)
        stuck = stale_ms > bound_ms
        if stuck != self.stalled:
            self.stalled = stuck
            if stuck:
                logger.error("event loop silent: no longer renewing the session",
                             silent_ms=stale_ms, fence_in_ms=fence_mono_ms - now)
            else:
                logger.warning("event loop back: renewing the session again")
        return stuck


def throttled_mono_ms(mono: Callable[[], int]) -> int | None:
    """When any DynamoDB call of this process was last refused as throttled (a checkpoint
    or a claim often meets a wave before the heartbeat does), on ``mono``'s clock."""
    at_s = throttled_at_s()
    return None if at_s is None else mono() - round(1000 * (time.monotonic() - at_s))


def heartbeat_period_ms(timing: rules.LeaseTiming, mono: Callable[[], int],
                        failed_mono_ms: int | None) -> int:
    """The heartbeat period; ``rules.throttled_heartbeat_ms`` for two periods after any
    refused call (``failed_mono_ms``: the keep-alive's own last failed attempt; or any
    other, ``throttled_mono_ms``: throttling comes in waves, a partial phase before a full
    one), so a full outage of ``rules.OUTAGE_TOLERANCE_MS`` fences nothing. Two periods, not
    longer: once DynamoDB is back the worker's call rate is too."""
    refused = [t for t in (failed_mono_ms, throttled_mono_ms(mono)) if t is not None]
    troubled = bool(refused) and mono() - max(refused) < 2 * timing.heartbeat_ms
    return rules.throttled_heartbeat_ms(timing) if troubled else timing.heartbeat_ms
