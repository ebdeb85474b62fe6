"""Throttled PartiQL statements are re-sent together, never one by one with re-reads."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from holdfast.core.batch import THROTTLE_ROUNDS, RenewRequest, renew_many
from holdfast.core.exceptions import StoreUnavailable
from holdfast.core.model import Lease
from holdfast.core.store import LeaseStore


class FakeDdb:
    """Answers batch calls from a script; any single-item call is recorded as a fallback."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.batches: list[int] = []
        self.singles: list[str] = []

    def batch_execute_statement(self, Statements: list[str]) -> dict[str, Any]:
        self.batches.append(len(Statements))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return {"Responses": [step(i) for i in range(len(Statements))]}

    def __getattr__(self, name: str) -> Any:
        def single(**_: Any) -> dict[str, Any]:
            self.singles.append(name)
            return {}
        return single


def _throttled(code: str) -> dict[str, Any]:
    return {"Error": {"Code": code, "Message": "slow down"}}


def _requests(n: int) -> list[RenewRequest]:
    return [RenewRequest(Lease(f"c{i}", "w1", 1, 0, "ws://x", 0), i + 1) for i in range(n)]


def _store(ddb: FakeDdb) -> LeaseStore:
    return LeaseStore(ddb, "t", lease_ms=4000, skew_ms=500, clock=lambda: 1_000)  # type: ignore[arg-type]


def test_throttled_statements_are_retried_together() -> None:
    """Ten throttled statements of 25 go again as one batch of ten, with no single-item call."""
    ddb = FakeDdb([
        lambda i: _throttled("ThrottlingError" if i % 2 else "ProvisionedThroughputExceeded")
        if i < 10 else {},
        lambda i: {}])
    results = renew_many(_store(ddb), _requests(25))
    assert ddb.batches == [25, 10]
    assert ddb.singles == []
    assert all(r.lease is not None and r.lease.last_seq == i + 1 for i, r in enumerate(results))


def test_still_throttled_statements_wait_for_the_next_checkpoint() -> None:
    """Throttled in every round: a bounded number of batch calls, then StoreUnavailable."""
    ddb = FakeDdb([lambda i: _throttled("ThrottlingError")] * 3)
    results = renew_many(_store(ddb), _requests(3))
    assert ddb.batches == [3] * (THROTTLE_ROUNDS + 1) and ddb.singles == []
    assert all(isinstance(r.error, StoreUnavailable) for r in results)


def test_a_throttled_call_is_not_split_into_single_renewals() -> None:
    """A whole batch refused as throttled costs no per-lease UpdateItem."""
    refused = ClientError({"Error": {"Code": "ProvisionedThroughputExceededException",
                                     "Message": "slow down"}}, "BatchExecuteStatement")
    ddb = FakeDdb([refused])
    results = renew_many(_store(ddb), _requests(5))
    assert ddb.batches == [5] and ddb.singles == []
    assert all(isinstance(r.error, StoreUnavailable) for r in results)
