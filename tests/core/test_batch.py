"""Integration tests of batched renewals (PartiQL on DynamoDB Local, single calls on moto)."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.batch import RenewRequest, renew_many
from holdfast.core.exceptions import LeaseLost, LossReason, StoreUnavailable
from holdfast.core.model import Lease
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream, set_desired_state
from holdfast.localaws import LocalAws
from tests.conftest import client_for
from tests.core.faults import drop_request
from tests.core.test_store import LEASE_MS, SKEW_MS, Clock


def held(store: LeaseStore, ddb: Any, prefix: str, n: int) -> tuple[list[str], list[Lease]]:
    """Create ``n`` streams and acquire them all as worker w1."""
    ids = [f"{prefix}-{i}" for i in range(n)]
    for cid in ids:
        create_stream(ddb, store.table, cid, "ws://127.0.0.1:9/s/x")
    return ids, [store.acquire(cid, "w1") for cid in ids]


@pytest.fixture
def setup(any_aws: LocalAws) -> tuple[LeaseStore, Any, Clock, str]:
    ddb = client_for(any_aws, "dynamodb")
    clock = Clock()
    store = LeaseStore(ddb, any_aws.table, lease_ms=LEASE_MS, skew_ms=SKEW_MS, clock=clock)
    mode = any_aws.env()["HOLDFAST_RENEW_MODE"]
    return store, ddb, clock, mode


def test_renew_many_across_batches_with_losses(setup: tuple[LeaseStore, Any, Clock, str],
                                               unique_id: str) -> None:
    """60 leases over three batches: healthy ones renew, lost/stopped/deleted are told apart."""
    store, ddb, clock, mode = setup
    ids, leases = held(store, ddb, unique_id, 60)
    ddb.update_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{ids[3]}"}},
                    UpdateExpression="SET lease_owner = :o, lease_epoch = :e",
                    ExpressionAttributeValues={":o": {"S": "w2"}, ":e": {"N": "9"}})
    set_desired_state(ddb, store.table, ids[30], "STOPPED")
    ddb.delete_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{ids[55]}"}})
    clock.now += 2_000
    results = renew_many(store, [RenewRequest(lease, i) for i, lease in enumerate(leases)], mode)
    assert [r.conn_id for r in results] == ids
    failed = {r.conn_id: r.error for r in results if r.error is not None}
    assert set(failed) == {ids[3], ids[30], ids[55]}
    reasons = {cid: err.reason for cid, err in failed.items() if isinstance(err, LeaseLost)}
    assert reasons == {ids[3]: LossReason.LOST, ids[30]: LossReason.STOPPED,
                       ids[55]: LossReason.DELETED}
    item = store.get(ids[10])
    assert item is not None and item.last_seq == 10
    assert item.lease_expires_at_ms == clock.now + LEASE_MS
    renewed = results[10].lease
    assert renewed is not None and renewed.expires_at_ms == clock.now + LEASE_MS


def test_renew_many_checkpoint_never_regresses(setup: tuple[LeaseStore, Any, Clock, str],
                                               unique_id: str) -> None:
    """A batch never lowers last_seq below what is stored."""
    store, ddb, _, mode = setup
    ids, acquired = held(store, ddb, unique_id, 3)
    leases = [store.renew(lease, 50) for lease in acquired]
    results = renew_many(store, [RenewRequest(lease, 7) for lease in leases], mode)
    assert all(r.error is None for r in results)
    for cid in ids:
        item = store.get(cid)
        assert item is not None and item.last_seq == 50


def test_renew_many_store_down_is_unknown(setup: tuple[LeaseStore, Any, Clock, str],
                                          unique_id: str) -> None:
    """When DynamoDB cannot be reached every result is StoreUnavailable, none is lost."""
    store, ddb, _, mode = setup
    _, leases = held(store, ddb, unique_id, 4)
    op = "BatchExecuteStatement" if mode == "batch" else "UpdateItem"
    with drop_request(ddb, op, times=100), drop_request(ddb, "UpdateItem", times=100), \
            drop_request(ddb, "GetItem", times=100):
        results = renew_many(store, [RenewRequest(lease, 1) for lease in leases], mode)
    assert all(isinstance(r.error, StoreUnavailable) for r in results)


class _NoCalls:
    """A DynamoDB client that fails the test on any call."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"renewing nothing called DynamoDB: {name}")


def test_empty_renew_many_makes_no_call(setup: tuple[LeaseStore, Any, Clock, str]) -> None:
    """Renewing nothing returns nothing and sends no request."""
    store, _, clock, mode = setup
    silent = LeaseStore(_NoCalls(), store.table, lease_ms=LEASE_MS,  # type: ignore[arg-type]
                        skew_ms=SKEW_MS, clock=clock)
    assert renew_many(silent, [], mode) == []


def test_renew_many_in_a_pool_keeps_order(setup: tuple[LeaseStore, Any, Clock, str],
                                          unique_id: str) -> None:
    """Chunks renewed concurrently in a pool still come back in request order, all renewed."""
    from concurrent.futures import ThreadPoolExecutor

    store, ddb, clock, mode = setup
    ids, leases = held(store, ddb, unique_id, 55)
    clock.now += 1_000
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = renew_many(store, [RenewRequest(lease, 2) for lease in leases], mode,
                             pool=pool)
    assert [r.conn_id for r in results] == ids
    assert all(r.lease is not None and r.lease.expires_at_ms == clock.now + LEASE_MS
               for r in results)


def test_a_lost_lease_in_a_batch_is_known_without_a_call_of_its_own(
        setup: tuple[LeaseStore, Any, Clock, str], unique_id: str) -> None:
    """A batch statement refused on its condition is judged from the item it returns: with
    every single call failing (a throttled table), the lost lease is LeaseLost at once, not
    "unavailable" until the next checkpoint, and an overtaken renewal still counts as ours."""
    store, ddb, clock, mode = setup
    if mode != "batch":
        pytest.skip("the single-call mode has no batch statement")
    ids, leases = held(store, ddb, unique_id, 3)
    ddb.update_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{ids[0]}"}},
                    UpdateExpression="SET lease_owner = :o, lease_epoch = :e",
                    ExpressionAttributeValues={":o": {"S": "w2"}, ":e": {"N": "9"}})
    clock.now += 2_000
    later = store.renew(leases[1], 5)  # a later renewal of ours lands first
    clock.now -= 1_000
    with drop_request(ddb, "UpdateItem", times=100) as updates, \
            drop_request(ddb, "GetItem", times=100) as reads:
        results = renew_many(store, [RenewRequest(lease, 1) for lease in leases], mode)
    assert (updates, reads) == ([], [])
    lost = results[0].error
    assert isinstance(lost, LeaseLost) and lost.reason is LossReason.LOST
    assert results[1].error is None and results[1].lease is not None
    assert results[1].lease.expires_at_ms == later.expires_at_ms
    assert results[2].error is None
