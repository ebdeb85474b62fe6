"""The session keep-alive's rules: the loop's publish period, its silence bound and judgement,
and the heartbeat period after refused calls, on injected clocks (no thread, no store). Each
test starts with no throttled call on record (``tests/conftest.py``)."""

from __future__ import annotations

import types

import pytest

from holdfast.core import aws, rules
from holdfast.worker import beatrules
from holdfast.worker.beatrules import (
    LoopSilence,
    heartbeat_period_ms,
    loop_bound_ms,
    publish_ms,
    throttled_mono_ms,
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


def test_the_publish_period_is_whole_milliseconds() -> None:
    """A quarter heartbeat rounded down to whole ms: a 90 ms heartbeat publishes every 22 ms."""
    timing = rules.LeaseTiming(lease_ms=800, heartbeat_ms=90, skew_ms=100, margin_ms=80)
    assert publish_ms(timing) == 22


def test_going_silent_logs_an_error_and_coming_back_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """The change to silent is logged as the error "event loop silent", the change back as
    the warning "event loop back", each at its own change."""
    silence = LoopSilence()
    silence.stuck(20_001, 10_000, 10_000, 30_000)
    assert [(r.levelname, "event loop silent" in r.getMessage()) for r in caplog.records] == [
        ("ERROR", True)]
    caplog.clear()
    silence.stuck(20_001, 20_000, 10_000, 30_000)
    assert [(r.levelname, "event loop back" in r.getMessage()) for r in caplog.records] == [
        ("WARNING", True)]


def test_the_latest_refusal_counts_when_there_are_two() -> None:
    """An old failed attempt of the keep-alive and a throttled call just now: the period is
    the throttled one, counted from the latest of the two."""
    old = monotonic_ms() - 10 * TIMING.heartbeat_ms
    assert heartbeat_period_ms(TIMING, monotonic_ms, old) == TIMING.heartbeat_ms
    aws.note_throttled()
    assert heartbeat_period_ms(TIMING, monotonic_ms, old) == (
        rules.throttled_heartbeat_ms(TIMING))


def test_a_throttled_call_is_placed_on_the_given_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's last throttled call, 5 s ago on ``time.monotonic``, is 5,000 ms before
    now on the keep-alive's own clock; None with none on record."""
    assert throttled_mono_ms(lambda: 50_000) is None
    monkeypatch.setattr(beatrules, "throttled_at_s", lambda: 100.0)
    monkeypatch.setattr(beatrules, "time", types.SimpleNamespace(monotonic=lambda: 105.0))
    assert throttled_mono_ms(lambda: 50_000) == 45_000
