"""The reconnect budget: a token bucket shared out over the fleet, with jitter."""

from __future__ import annotations

import pytest

from holdfast.worker.budget import ConnectBudget, TokenBucket


def test_a_full_bucket_lets_a_burst_through_then_paces_at_the_rate() -> None:
    """Burst tokens go at once; the next one waits one token's interval."""
    bucket = TokenBucket(rate=10, burst=3)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.1)
    assert bucket.take(0.0) == pytest.approx(0.2)


def test_tokens_come_back_with_time_up_to_the_burst() -> None:
    """Idle time refills the bucket, never beyond the burst."""
    bucket = TokenBucket(rate=10, burst=2)
    bucket.take(0.0), bucket.take(0.0)
    assert bucket.take(100.0) == 0.0 and bucket.take(100.0) == 0.0
    assert bucket.take(100.0) > 0


def test_rate_zero_is_no_limit() -> None:
    """A rate of 0 never makes a connect wait."""
    bucket = TokenBucket(rate=0, burst=1)
    assert all(bucket.take(0.0) == 0.0 for _ in range(1000))


def test_each_worker_takes_its_share_of_the_fleet_budget() -> None:
    """Four live workers: each gets a quarter of the rate and of the burst."""
    budget = ConnectBudget(fleet_rate=100, fleet_burst=40, clock=lambda: 0.0)
    budget.set_fleet(4)
    assert (budget.bucket.rate, budget.bucket.burst) == (25, 10)
    budget.set_fleet(0)  # nonsense is ignored
    assert budget.fleet == 4


async def test_a_connect_that_must_wait_waits_with_jitter() -> None:
    """Past the burst, admit sleeps the token's wait plus a random part of an interval."""
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    budget = ConnectBudget(fleet_rate=10, fleet_burst=1, clock=lambda: 0.0, sleep=sleep,
                           rand=lambda: 0.5)
    assert await budget.admit() == 0.0
    waited = await budget.admit()
    assert waited == pytest.approx(0.1 + 0.05) and slept == [waited]
