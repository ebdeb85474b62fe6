"""The session keep-alive's rules: the loop's publish period, its silence bound and judgement,
and the heartbeat period after refused calls, on injected clocks (no thread, no store). Each
test starts with no throttled call on record (``tests/conftest.py``)."""

from __future__ import annotations

import pytest

from holdfast.core import aws, rules
from holdfast.worker.beatrules import (
    LoopSilence,
    heartbeat_period_ms,
    loop_bound_ms,
    publish_ms,
)
from holdfast.worker.held import monotonic_ms

TIMING = rules.LeaseTiming(lease_ms=4000, heartbeat_ms=1000, skew_ms=500, margin_ms=400)
LONG = rules.LeaseTiming(lease_ms=30_000, heartbeat_ms=10_000, skew_ms=500, margin_ms=400)


def test_the_loop_publishes_every_quarter_heartbeat_at_most_250_ms() -> None:
    """The loop stamps its clock every quarter heartbeat, never less often than every 250 ms."""
    assert publish_ms(rules.LeaseTiming(lease_ms=800, heartbeat_ms=100, skew_ms=100,
                                        margin_ms=80)) == 25
    assert publish_ms(TIMING) == 250 and publish_ms(LONG) == 250


def test_the_loop_may_be_silent_10_s_or_two_ttls_if_longer() -> None:
    """The silence bound is 10 s, or twice the session TTL when that is longer."""
    assert loop_bound_ms(TIMING) == 10_000
    assert loop_bound_ms(LONG) == 60_000


def test_a_loop_silent_past_the_bound_is_stuck_and_each_change_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """Stuck only past the bound; going silent and coming back are each logged once."""
    silence = LoopSilence()
    assert not silence.stuck(20_000, 10_000, 10_000, 30_000)  # at the bound: not yet
    assert silence.stuck(20_001, 10_000, 10_000, 30_000)
    assert silence.stuck(25_000, 10_000, 10_000, 30_000)
    assert not silence.stuck(25_000, 24_900, 10_000, 30_000)  # stamped again
    assert not silence.stuck(26_000, 25_900, 10_000, 30_000)
    assert caplog.text.count("event loop silent") == 1
    assert caplog.text.count("event loop back") == 1


def test_the_period_is_short_for_two_periods_after_a_failed_attempt() -> None:
    """A failed attempt: the throttled period for two heartbeat periods, then the usual one."""
    now = [50_000]
    assert heartbeat_period_ms(TIMING, lambda: now[0], None) == TIMING.heartbeat_ms
    short = rules.throttled_heartbeat_ms(TIMING)
    assert heartbeat_period_ms(TIMING, lambda: now[0], 50_000) == short
    now[0] += 2 * TIMING.heartbeat_ms - 1
    assert heartbeat_period_ms(TIMING, lambda: now[0], 50_000) == short
    now[0] += 1
    assert heartbeat_period_ms(TIMING, lambda: now[0], 50_000) == TIMING.heartbeat_ms


def test_a_throttled_call_elsewhere_halves_the_period_too() -> None:
    """A checkpoint or claim refused as throttled puts the heartbeat on its short period."""
    assert heartbeat_period_ms(TIMING, monotonic_ms, None) == TIMING.heartbeat_ms
    aws.note_throttled()
    assert heartbeat_period_ms(TIMING, monotonic_ms, None) == rules.throttled_heartbeat_ms(TIMING)
