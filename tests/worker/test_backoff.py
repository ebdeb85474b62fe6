"""Back-off policy: growing jittered delays, a give-up point, retry-later delays."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from holdfast.worker.backoff import Backoff, errors_before, jittered, nudge_again_in_s


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


def test_a_back_off_nudge_comes_back_when_it_ends_and_never_is_deleted_for_being_late() -> None:
    """Rounded up plus a second; at least a second when the back-off ended before the answer
    came (it was None, and the nudge deleted); None past SQS's delay limit."""
    assert nudge_again_in_s(2_500, 900) == 4
    assert nudge_again_in_s(0, 900) == 1
    assert nudge_again_in_s(-1_000, 900) == 1
    assert nudge_again_in_s(-30_000, 900) == 1
    assert nudge_again_in_s(899_000, 900) == 900
    assert nudge_again_in_s(900_001, 900) is None


def test_a_give_up_after_progress_counts_from_zero() -> None:
    """The give-ups in a row before this one: the item's count without progress, 0 with any."""
    assert errors_before(3, handled=0) == 3
    assert errors_before(3, handled=1) == 0
    assert errors_before(0, handled=0) == 0
