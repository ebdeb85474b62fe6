"""A renewal keeps the whole lease: a weighted, moved stream stays weighted and moved (issue 18,
the weight bug: the old ``_renewed`` rebuilt ``Lease`` field by field and dropped ``weight``
and ``moved_at_ms``, so after the first checkpoint every stream weighed 1)."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.batch import RenewMode, RenewRequest, renew_many
from holdfast.core.model import Lease
from holdfast.core.store import LeaseStore
from holdfast.localaws import LocalAws
from tests.core.test_store import Clock, put_raw

WEIGHT = 3.0
MOVED_AGO_MS = 30_000


def weighted_moved_lease(store: LeaseStore, ddb: Any, clock: Clock, conn_id: str) -> Lease:
    """A stream with ``weight = 3`` that a rebalancing move handed on, acquired by w1."""
    put_raw(ddb, store.table, conn_id, weight={"N": "3"}, lease_expires_at_ms={"N": "0"},
            moved_at_ms={"N": str(clock.now - MOVED_AGO_MS)})
    lease = store.acquire(conn_id, "w1#inc1")
    assert (lease.weight, lease.moved_at_ms) == (WEIGHT, clock.now - MOVED_AGO_MS)
    return lease


def assert_kept(renewed: Lease | None, original: Lease) -> None:
    assert renewed is not None
    assert renewed.weight == WEIGHT and renewed.moved_at_ms == original.moved_at_ms


def test_renew_keeps_weight_and_moved_at(store: LeaseStore, ddb: Any, clock: Clock,
                                         unique_id: str) -> None:
    """``renew`` (extending, and checkpoint-only) returns the lease with its weight and move."""
    lease = weighted_moved_lease(store, ddb, clock, unique_id)
    clock.now += 1_000
    extended = store.renew(lease, 5)
    assert extended.last_seq == 5
    assert_kept(extended, lease)
    clock.now += 1_000
    checkpointed = store.renew(extended, 9, extend=False)
    assert checkpointed.last_seq == 9
    assert_kept(checkpointed, lease)


@pytest.mark.parametrize("mode", ["batch", "single"])
def test_renew_many_keeps_weight_and_moved_at(store: LeaseStore, ddb: Any, clock: Clock,
                                              any_aws: LocalAws, unique_id: str,
                                              mode: RenewMode) -> None:
    """``renew_many`` in batch and single mode returns each lease with its weight and move."""
    if mode == "batch" and any_aws.backend == "moto":
        pytest.skip("moto's PartiQL ignores conditions: batch mode runs on DynamoDB Local")
    leases = [weighted_moved_lease(store, ddb, clock, f"{unique_id}-{i}") for i in range(2)]
    clock.now += 1_000
    results = renew_many(store, [RenewRequest(lease, 4) for lease in leases], mode)
    for result, lease in zip(results, leases, strict=True):
        assert result.error is None, result.error
        assert result.lease is not None and result.lease.last_seq == 4
        assert_kept(result.lease, lease)
    clock.now += 1_000
    again = renew_many(store, [RenewRequest(r.lease, 6, extend=False) for r in results
                               if r.lease is not None], mode)
    for result, lease in zip(again, leases, strict=True):
        assert result.error is None, result.error
        assert_kept(result.lease, lease)
