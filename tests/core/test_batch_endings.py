"""Releases in PartiQL batches (``release_many``) write exactly what ``LeaseStore.release``
writes, each statement on its own; what a batch cannot settle goes alone through the store."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from holdfast.core.batch_endings import ReleaseRequest, release_many
from holdfast.core.exceptions import LossReason, StoreUnavailable
from holdfast.core.model import Lease
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from tests.conftest import client_for, own_tables
from tests.core.test_batch_throttle import FakeDdb
from tests.core.test_store import LEASE_MS, SKEW_MS, Clock

URL = "ws://127.0.0.1:9/s"
# Written at each call's own time, or per table: not part of what a release decides.
_VOLATILE = {ATTR.pk}


@pytest.fixture
def pair(ddb_local: LocalAws) -> tuple[Any, LeaseStore, LeaseStore]:
    """Two tables with the same clock: one released alone, one in a batch."""
    ddb, clock = client_for(ddb_local, "dynamodb"), Clock()
    alone, batched = (LeaseStore(ddb, own_tables(ddb_local)[0], lease_ms=LEASE_MS,
                                 skew_ms=SKEW_MS, clock=clock) for _ in range(2))
    return ddb, alone, batched


def _held(ddb: Any, store: LeaseStore, conn_id: str, owner: str = "w1") -> Any:
    assert create_stream(ddb, store.table, conn_id, URL)
    return store.acquire(conn_id, owner)


def _item(ddb: Any, store: LeaseStore, conn_id: str) -> dict[str, Any]:
    raw = ddb.get_item(TableName=store.table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                       ConsistentRead=True)["Item"]
    return {k: v for k, v in raw.items() if k not in _VOLATILE}


def test_a_batch_writes_what_a_release_alone_writes(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """Plain, moved, named successor and with a checkpoint: the same item either way."""
    ddb, alone, batched = pair
    # (final checkpoint, moved, successor); "w1" is the holder itself: no handoff.
    kinds: list[tuple[int | None, bool, str | None]] = [
        (None, False, None), (7, True, None), (9, False, "w2"), (3, False, "w1")]
    leases = {s.table: [_held(ddb, s, f"c{i}") for i in range(len(kinds))]
              for s in (alone, batched)}
    for (seq, moved, successor), lease in zip(kinds, leases[alone.table], strict=True):
        assert alone.release(lease, seq, moved=moved, successor=successor) is None
    results = release_many(batched, [
        ReleaseRequest(lease, seq, moved=moved, successor=successor)
        for (seq, moved, successor), lease in zip(kinds, leases[batched.table], strict=True)])
    assert [(r.lost, r.error) for r in results] == [(None, None)] * len(kinds)
    for i in range(len(kinds)):
        assert _item(ddb, batched, f"c{i}") == _item(ddb, alone, f"c{i}")
    assert _item(ddb, batched, "c2")[ATTR.successor] == {"S": "w2"}
    assert ATTR.lease_owner not in _item(ddb, batched, "c0")


def test_a_lease_lost_in_a_batch_is_told_and_the_others_are_released(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """One stream taken over meanwhile: LOST for it alone; the checkpoint never goes back."""
    ddb, _, store = pair
    leases = [_held(ddb, store, f"c{i}") for i in range(3)]
    assert store.release(leases[1]) is None
    store.clock.now += 1  # type: ignore[attr-defined]
    taken = store.acquire("c1", "w2")
    results = release_many(store, [ReleaseRequest(lease, 5) for lease in leases])
    assert [r.lost for r in results] == [None, LossReason.LOST, None]
    assert _item(ddb, store, "c1")[ATTR.lease_owner] == {"S": "w2"}
    assert _item(ddb, store, "c1")[ATTR.epoch] == {"N": str(taken.epoch)}
    assert ATTR.lease_owner not in _item(ddb, store, "c2")


def test_a_replayed_release_in_a_batch_is_done_not_lost(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """A release that landed already (an answer lost, sent again) counts as released."""
    ddb, _, store = pair
    leases = [_held(ddb, store, f"c{i}") for i in range(2)]
    assert store.release(leases[0], 4) is None
    results = release_many(store, [ReleaseRequest(lease, 4) for lease in leases])
    assert [(r.lost, r.error) for r in results] == [(None, None), (None, None)]


def test_a_checkpoint_moved_past_ours_in_a_batch_is_released_keeping_it(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """One stream's stored checkpoint moved past ours by someone else: its statement fails
    while the stream is still ours; released all the same, keeping that checkpoint."""
    ddb, _, store = pair
    leases = [_held(ddb, store, f"c{i}") for i in range(2)]
    ddb.update_item(TableName=store.table, Key={ATTR.pk: {"S": pk_for("c1")}},
                    UpdateExpression="SET last_seq = :s",
                    ExpressionAttributeValues={":s": {"N": "100"}})
    results = release_many(store, [ReleaseRequest(lease, 5) for lease in leases])
    assert [(r.lost, r.error) for r in results] == [(None, None), (None, None)]
    assert ATTR.lease_owner not in _item(ddb, store, "c1")
    assert _item(ddb, store, "c1")[ATTR.last_seq] == {"N": "100"}


def _calls(ddb: Any, ops: tuple[str, ...]) -> tuple[list[str], Any]:
    """Count ``ops`` on ``ddb`` (the list), and the handler to unregister."""
    seen: list[str] = []

    def count(model: Any, **_: Any) -> None:
        seen.append(model.name)

    for op in ops:
        ddb.meta.events.register(f"before-call.dynamodb.{op}", count)
    return seen, count


def test_a_replayed_handoff_release_is_settled_by_one_read_also_once_the_successor_took_it(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """A batch that landed, replayed by botocore after a timeout: released, none lost, no call
    alone, though the named successor acquired some streams in between."""
    ddb, _, store = pair
    leases = [_held(ddb, store, f"c{i}") for i in range(4)]
    requests = [ReleaseRequest(lease, 6, successor="w2") for lease in leases]
    assert [r.lost for r in release_many(store, requests)] == [None] * 4
    store.clock.now += 1  # type: ignore[attr-defined]
    store.acquire("c1", "w2")
    store.acquire("c3", "w2")
    seen, handler = _calls(ddb, ("UpdateItem", "BatchGetItem", "GetItem"))
    try:
        results = release_many(store, requests)  # the replay
    finally:
        for op in ("UpdateItem", "BatchGetItem", "GetItem"):
            ddb.meta.events.unregister(f"before-call.dynamodb.{op}", handler)
    assert [(r.lost, r.error) for r in results] == [(None, None)] * 4
    assert seen == ["BatchGetItem"]
    assert _item(ddb, store, "c1")[ATTR.lease_owner] == {"S": "w2"}


def test_an_unknown_outcome_still_ours_is_an_error_to_retry_and_a_landed_one_is_done(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """Statements whose outcome DynamoDB could not tell: read back, the one still held is
    StoreUnavailable (the caller retries), the one released already is done."""
    ddb, _, store = pair
    leases = [_held(ddb, store, f"c{i}") for i in range(2)]
    assert store.release(leases[1], 3) is None

    def unknown(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        # An answer made here: the call never reaches DynamoDB Local.
        error = {"Code": "InternalServerError", "Message": "try again"}
        statements = json.loads(params["body"])["Statements"]
        return (SimpleNamespace(status_code=200, headers={}),
                {"Responses": [{"Error": error} for _ in statements]})

    ddb.meta.events.register("before-call.dynamodb.BatchExecuteStatement", unknown)
    try:
        results = release_many(store, [ReleaseRequest(lease, 3) for lease in leases])
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.BatchExecuteStatement", unknown)
    assert isinstance(results[0].error, StoreUnavailable) and results[0].lost is None
    assert (results[1].lost, results[1].error) == (None, None)
    assert _item(ddb, store, "c0")[ATTR.lease_owner] == {"S": "w1"}  # not written


def test_an_item_missing_what_the_marker_copies_is_released_alone(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """PartiQL cannot copy a missing desired state: that item alone gets the marker's default."""
    ddb, _, store = pair
    leases = [_held(ddb, store, f"c{i}") for i in range(2)]
    ddb.update_item(TableName=store.table, Key={ATTR.pk: {"S": pk_for("c1")}},
                    UpdateExpression="REMOVE #ds",
                    ExpressionAttributeNames={"#ds": ATTR.desired_state})
    results = release_many(store, [ReleaseRequest(lease) for lease in leases])
    assert [(r.lost, r.error) for r in results] == [(None, None), (None, None)]
    assert _item(ddb, store, "c1")[ATTR.unowned_desired_state] == {"S": "UNKNOWN"}
    assert _item(ddb, store, "c0")[ATTR.unowned_desired_state] == {"S": "STARTED"}


def test_a_throttled_statement_is_an_error_to_retry_not_a_call_alone() -> None:
    """Throttled statements come back unreleased (StoreUnavailable), with no single write."""
    fake = FakeDdb([lambda i: {"Error": {"Code": "ThrottlingException", "Message": "slow"}}
                    if i % 2 else {}])
    store = LeaseStore(fake, "t", lease_ms=4000, skew_ms=500,  # type: ignore[arg-type]
                       clock=lambda: 1_000)
    results = release_many(store, [ReleaseRequest(Lease(f"c{i}", "w1", 1, 0, URL, 0))
                                   for i in range(4)])
    assert [r.error is None for r in results] == [True, False, True, False]
    assert all(isinstance(r.error, StoreUnavailable) for r in results[1::2])
    assert fake.batches == [4] and fake.singles == []

