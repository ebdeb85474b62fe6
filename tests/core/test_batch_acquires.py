"""Acquires in batches (``acquire_many``) take what ``LeaseStore.acquire`` takes, write what it
writes and answer what it answers; what a batch cannot settle goes alone through the store."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from holdfast.core.batch_acquires import AcquireRequest, acquire_many
from holdfast.core.exceptions import AcquireFailed, HoldfastError, StoreUnavailable
from holdfast.core.model import Lease
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream, set_desired_state
from holdfast.localaws import LocalAws
from tests.conftest import client_for, own_tables
from tests.core.test_store import LEASE_MS, SKEW_MS, Clock, put_raw

URL = "ws://127.0.0.1:9/s"
ME = "w1#a"
# Each stream's state before the acquire, set up the same way on both tables.
Setup = Callable[[Any, LeaseStore, str], None]


def _created(ddb: Any, store: LeaseStore, c: str) -> None:
    assert create_stream(ddb, store.table, c, URL)


def _released_by_another(ddb: Any, store: LeaseStore, c: str) -> None:
    _created(ddb, store, c)
    lease = store.acquire(c, "w2#b")
    store.release(store.renew(lease, 41), 42)


def _checkpointed_by_hand(ddb: Any, store: LeaseStore, c: str) -> None:
    put_raw(ddb, store.table, c, last_seq={"N": "17"})


def _held_by_another(ddb: Any, store: LeaseStore, c: str) -> None:
    _created(ddb, store, c)
    store.acquire(c, "w2#b")


def _ours_already(ddb: Any, store: LeaseStore, c: str) -> None:
    _created(ddb, store, c)
    store.acquire(c, ME)


def _stopped(ddb: Any, store: LeaseStore, c: str) -> None:
    _created(ddb, store, c)
    set_desired_state(ddb, store.table, c, "STOPPED")


def _backing_off(ddb: Any, store: LeaseStore, c: str) -> None:
    put_raw(ddb, store.table, c, lease_expires_at_ms={"N": str(store.clock() + 60_000)})


def _handed_to_me(ddb: Any, store: LeaseStore, c: str) -> None:
    put_raw(ddb, store.table, c, lease_expires_at_ms={"N": str(store.clock() + 60_000)},
            successor={"S": ME}, lease_epoch={"N": str(store.clock() + 5)})


def _malformed(ddb: Any, store: LeaseStore, c: str) -> None:
    put_raw(ddb, store.table, c, lease_epoch={"S": "seven"})


def _absent(ddb: Any, store: LeaseStore, c: str) -> None:
    pass


# (set-up, first checkpoint asked for)
CASES: list[tuple[Setup, int | None]] = [
    (_created, None), (_created, 4), (_released_by_another, None), (_released_by_another, 3),
    (_checkpointed_by_hand, 5), (_checkpointed_by_hand, None), (_held_by_another, None),
    (_ours_already, None), (_stopped, None), (_backing_off, None), (_handed_to_me, None),
    (_malformed, None), (_absent, None),
]


@pytest.fixture
def pair(ddb_local: LocalAws) -> tuple[Any, LeaseStore, LeaseStore]:
    """Two tables with one clock: one acquired alone, one in a batch."""
    ddb, clock = client_for(ddb_local, "dynamodb"), Clock()
    alone, batched = (LeaseStore(ddb, own_tables(ddb_local)[0], lease_ms=LEASE_MS,
                                 skew_ms=SKEW_MS, clock=clock) for _ in range(2))
    return ddb, alone, batched


def _item(ddb: Any, store: LeaseStore, conn_id: str) -> dict[str, Any] | None:
    raw = ddb.get_item(TableName=store.table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                       ConsistentRead=True).get("Item")
    return None if raw is None else {k: v for k, v in raw.items() if k != ATTR.pk}


def _answer(answer: Lease | HoldfastError) -> Any:
    if isinstance(answer, AcquireFailed):
        return ("refused", answer.reason, answer.current)
    return answer if isinstance(answer, Lease) else type(answer).__name__


def _calls(ddb: Any) -> tuple[list[str], Callable[[], None]]:
    seen: list[str] = []

    def count(model: Any, **_: Any) -> None:
        seen.append(model.name)

    ddb.meta.events.register("before-call.dynamodb", count)
    return seen, lambda: ddb.meta.events.unregister("before-call.dynamodb", count)


def test_a_batch_takes_writes_and_answers_what_the_acquire_alone_does(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """Every kind of item, claimable or not: the same leases (epoch, checkpoint, unowned
    time), the same refusals and the same items either way."""
    ddb, alone, batched = pair
    for store in (alone, batched):
        for i, (setup, _) in enumerate(CASES):
            setup(ddb, store, f"c{i}")
    alone.clock.now += 2_000  # type: ignore[attr-defined]
    requests = [AcquireRequest(f"c{i}", ME, first) for i, (_, first) in enumerate(CASES)]
    single = []
    for r in requests:
        try:
            single.append(_answer(alone.acquire(r.conn_id, ME,
                                                first_checkpoint=r.first_checkpoint)))
        except HoldfastError as exc:
            single.append(_answer(exc))
    assert [_answer(a) for a in acquire_many(batched, requests)] == single
    for i in range(len(CASES)):
        assert _item(ddb, batched, f"c{i}") == _item(ddb, alone, f"c{i}"), CASES[i]
    leases = [a for a in single if isinstance(a, Lease)]
    assert len(leases) == 8 and any(a.unowned_ms == 2_000 for a in leases)


def test_a_burst_of_claimable_streams_is_three_calls(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """30 new streams: a read, one batch per 25 and a read back; no UpdateItem."""
    ddb, _, store = pair
    for i in range(30):
        _created(ddb, store, f"c{i}")
    seen, done = _calls(ddb)
    try:
        answers = acquire_many(store, [AcquireRequest(f"c{i}", ME, i) for i in range(30)])
    finally:
        done()
    assert all(isinstance(a, Lease) and a.last_seq == i for i, a in enumerate(answers))
    assert sorted(seen) == sorted(["BatchGetItem", "BatchExecuteStatement", "BatchGetItem",
                                   "BatchGetItem", "BatchExecuteStatement", "BatchGetItem"])


def _answer_each(ddb: Any, code: str, *, after: bool = False) -> Callable[[], None]:
    """Make every statement of the next batch calls come back with ``code``: before the call
    (never written) or ``after`` it (written, its answer lost)."""
    error = {"Code": code, "Message": "made here"}

    def before(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        statements = json.loads(params["body"])["Statements"]
        return (SimpleNamespace(status_code=200, headers={}),
                {"Responses": [{"Error": error} for _ in statements]})

    def lost(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Responses"] = [{"Error": error} for _ in parsed.get("Responses", [])]

    event = ("after-call" if after else "before-call") + ".dynamodb.BatchExecuteStatement"
    handler = lost if after else before
    ddb.meta.events.register(event, handler)
    return lambda: ddb.meta.events.unregister(event, handler)


def test_throttled_statements_are_unavailable_without_a_single_write(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """A throttled batch: StoreUnavailable for each (the claim comes back later), no UpdateItem."""
    ddb, _, store = pair
    for i in range(3):
        _created(ddb, store, f"c{i}")
    undo = _answer_each(ddb, "ThrottlingException")
    seen, done = _calls(ddb)
    try:
        answers = acquire_many(store, [AcquireRequest(f"c{i}", ME) for i in range(3)])
    finally:
        undo()
        done()
    assert all(isinstance(a, StoreUnavailable) for a in answers)
    assert "UpdateItem" not in seen
    assert all(ATTR.lease_owner not in (_item(ddb, store, f"c{i}") or {}) for i in range(3))


def test_a_batch_whose_answer_was_lost_is_known_by_its_read_back(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """Written, but every statement's answer unknown: the read back finds each ours at the
    epoch written; one lease each, matching the item, with no write alone."""
    ddb, _, store = pair
    for i in range(3):
        _created(ddb, store, f"c{i}")
    undo = _answer_each(ddb, "InternalServerError", after=True)
    seen, done = _calls(ddb)
    try:
        answers = acquire_many(store, [AcquireRequest(f"c{i}", ME) for i in range(3)])
    finally:
        undo()
        done()
    for i, answer in enumerate(answers):
        assert isinstance(answer, Lease)
        item = _item(ddb, store, f"c{i}")
        assert item is not None and item[ATTR.lease_owner] == {"S": ME}
        assert item[ATTR.epoch] == {"N": str(answer.epoch)}
    assert "UpdateItem" not in seen


def test_streams_read_as_refused_cost_no_write(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """Held by another, STOPPED, backing off, gone: refused from the first read, as the acquire
    alone would refuse them, and nothing is written for them."""
    ddb, _, store = pair
    refused = [_held_by_another, _stopped, _backing_off, _absent]
    for i, setup in enumerate(refused):
        setup(ddb, store, f"c{i}")
    _created(ddb, store, "new")
    seen, done = _calls(ddb)
    try:
        answers = acquire_many(store, [AcquireRequest(f"c{i}", ME) for i in range(4)]
                               + [AcquireRequest("new", ME)])
    finally:
        done()
    assert [a.reason.name for a in answers[:4] if isinstance(a, AcquireFailed)] == [
        "HELD", "STOPPED", "BACKOFF", "DELETED"]
    assert isinstance(answers[4], Lease)
    assert "UpdateItem" not in seen and seen.count("BatchExecuteStatement") == 1


def test_an_item_changed_after_the_batch_is_settled_alone(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """An item deleted between the batch and its read back: DELETED for it, leases for the rest."""
    ddb, _, store = pair
    for i in range(3):
        _created(ddb, store, f"c{i}")

    def delete_one(**_: Any) -> None:
        ddb.meta.events.unregister("after-call.dynamodb.BatchExecuteStatement", delete_one)
        ddb.delete_item(TableName=store.table, Key={ATTR.pk: {"S": pk_for("c1")}})

    ddb.meta.events.register("after-call.dynamodb.BatchExecuteStatement", delete_one)
    answers = acquire_many(store, [AcquireRequest(f"c{i}", ME) for i in range(3)])
    assert isinstance(answers[0], Lease) and isinstance(answers[2], Lease)
    assert isinstance(answers[1], AcquireFailed) and answers[1].reason.name == "DELETED"


def test_an_unread_item_is_unavailable_and_not_written(
        pair: tuple[Any, LeaseStore, LeaseStore]) -> None:
    """The first read refused (throttled): StoreUnavailable for each, nothing written."""
    ddb, _, store = pair
    for i in range(2):
        _created(ddb, store, f"c{i}")

    def throttled(**_: Any) -> tuple[Any, dict[str, Any]]:
        return (SimpleNamespace(status_code=400, headers={}),
                {"Error": {"Code": "ThrottlingException", "Message": "made here"}})

    ddb.meta.events.register("before-call.dynamodb.BatchGetItem", throttled)
    seen, done = _calls(ddb)
    try:
        answers = acquire_many(store, [AcquireRequest(f"c{i}", ME) for i in range(2)])
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.BatchGetItem", throttled)
        done()
    assert all(isinstance(a, StoreUnavailable) for a in answers)
    assert "BatchExecuteStatement" not in seen and "UpdateItem" not in seen
