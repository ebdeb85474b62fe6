"""Back-off policy: growing jittered delays, a give-up point, retry-later delays."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from holdfast.worker.backoff import Backoff, Drops, errors_before, jittered, retry_before_s


def test_delays_grow_then_cap() -> None:
    """Delays double per failure up to the cap; half of each is jitter."""
    b = Backoff(base_s=1, cap_s=8)
    assert [b.delay_s(n, lambda: 1.0) for n in range(1, 6)] == [1, 2, 4, 8, 8]
    assert b.delay_s(3, lambda: 0.0) == 2  # never below half: no tight reconnect spin


@given(n=st.integers(1, 10_000), r=st.floats(0, 1))
def test_delay_bounds(n: int, r: float) -> None:
    """Any failure count gives a delay within [base/2, cap]."""
    b = Backoff()
    assert b.base_s / 2 <= b.delay_s(n, lambda: r) <= b.cap_s


def drops_of(*kinds: str) -> Drops:
    """The counts after drops of kind "fail" (no progress), "short" (progress, not stable) or
    "stable", in order."""
    drops = Drops()
    for kind in kinds:
        drops = drops.after(progressed=kind != "fail", stable=kind == "stable")
    return drops


def test_short_connections_that_deliver_grow_the_delay_to_a_lower_bound() -> None:
    """Short connections that delivered: 0.5, 1, 2, 4 s, then 4 s; never a give-up."""
    b, delays = Backoff(), []
    for n in range(1, 9):
        drops = drops_of(*["short"] * n)
        assert drops.failures == 1 and not b.give_up(drops.failures)
        delays.append(b.reconnect_s(drops, lambda: 1.0))
    assert delays == [0.5, 1, 2, 4, 4, 4, 4, 4]


def test_plain_failures_keep_their_growth_to_the_cap_and_their_give_up() -> None:
    """Drops without progress: the delays and give-up of ``delay_s`` and ``give_up`` alone."""
    b = Backoff()
    for n in range(1, 12):
        drops = drops_of(*["fail"] * n)
        assert drops.failures == n and b.give_up(drops.failures) == b.give_up(n)
        assert b.reconnect_s(drops, lambda: 1.0) == b.delay_s(n, lambda: 1.0)
    assert b.reconnect_s(drops_of(*["fail"] * 11), lambda: 1.0) == b.cap_s


def test_only_a_stable_connection_resets_the_delay() -> None:
    """A stable connection's drop starts again from the base delay; a short one's progress
    resets the give-up count only, and failures after short ones start from their delay."""
    b = Backoff()
    assert b.reconnect_s(drops_of(*["short"] * 5, "stable"), lambda: 1.0) == 0.5
    assert b.reconnect_s(drops_of("fail", "fail", "stable"), lambda: 1.0) == 0.5
    assert drops_of("fail", "fail", "short").failures == 1
    assert b.reconnect_s(drops_of("fail", "fail", "short"), lambda: 1.0) == 2
    assert b.reconnect_s(drops_of(*["short"] * 4, "fail"), lambda: 1.0) == 4
    assert b.reconnect_s(drops_of(*["fail"] * 5, "short"), lambda: 1.0) == 4


@given(kinds=st.lists(st.sampled_from(["fail", "short", "stable"]), min_size=1, max_size=40),
       r=st.floats(0, 1))
def test_reconnect_delay_bounds(kinds: list[str], r: float) -> None:
    """Any run of drops waits within [base/2, cap], at least half the short bound's delay of
    the drops since the last stable connection, and within that bound while all delivered."""
    b = Backoff()
    delay = b.reconnect_s(drops_of(*kinds), lambda: r)
    assert b.base_s / 2 <= delay <= b.cap_s
    since_stable = kinds[::-1].index("stable") if "stable" in kinds else len(kinds)
    short_ceiling = b.base_s * 2 ** min(max(0, since_stable - 1), b.short_doublings)
    assert delay >= short_ceiling / 2
    if "fail" not in kinds:
        assert delay <= b.base_s * 2**b.short_doublings


def test_give_up_and_retry_later() -> None:
    """Give up at max_failures; retry-later delays grow with the item's error count, capped."""
    b = Backoff(max_failures=3, retry_base_s=10, retry_cap_s=60)
    assert not b.give_up(2) and b.give_up(3)
    assert b.retry_after_s(1, lambda: 1.0) == 10
    assert b.retry_after_s(3, lambda: 1.0) == 40
    assert b.retry_after_s(50, lambda: 1.0) == 60


def test_jittered_period() -> None:
    """A jittered period stays within +/- a quarter of itself by default."""
    assert jittered(60, lambda: 0.0) == 45 and jittered(60, lambda: 1.0) == 75


def test_a_give_up_after_progress_counts_from_zero() -> None:
    """The give-ups in a row before this one: the item's count without progress, 0 with any."""
    assert errors_before(3, handled=0) == 3
    assert errors_before(3, handled=1) == 0
    assert errors_before(0, handled=0) == 0


def test_an_unanswered_last_write_is_retried_sooner_than_a_second_later() -> None:
    """A release or give-back DynamoDB did not answer waits 0.2 s more each time, at most 1 s
    (the release waited up to 4 s between its last tries, the give-back 1 s: one rule now)."""
    from holdfast.worker.backoff import unanswered_write_retry_s

    assert [round(unanswered_write_retry_s(n), 3) for n in range(7)] == [
        0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0]


def test_a_stable_connection_resets_both_counts_even_without_progress() -> None:
    """A connection that stayed up resets the give-up count though it delivered nothing (a
    quiet upstream), and the delay's count to 0: the next short drop waits the base delay."""
    assert Drops(failures=4, short=2).after(progressed=False, stable=True) == Drops(1, 0)
    b = Backoff()
    assert b.reconnect_s(drops_of(*["short"] * 5, "stable", "short"), lambda: 1.0) == 0.5


def test_retry_later_delays_are_a_quarter_jitter_below_their_ceiling() -> None:
    """A retry-later delay is within [3/4, 1] of its capped ceiling: never above the cap."""
    b = Backoff(retry_base_s=10, retry_cap_s=60)
    assert b.retry_after_s(1, lambda: 0.0) == 7.5
    assert b.retry_after_s(50, lambda: 0.0) == 45
    assert b.retry_after_s(2, lambda: 0.5) == 17.5


def test_a_retry_past_its_deadline_does_not_wait() -> None:
    """With the deadline already passed the pause is 0, never negative."""
    assert retry_before_s(3, -500, 0.1, 0.5, rand=lambda: 1.0) == 0.0
