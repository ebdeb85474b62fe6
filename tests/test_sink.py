"""holdfast.sink on DynamoDB Local: the fence refuses a lower epoch, a replay stays a replay."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from holdfast.localaws import LocalAws
from holdfast.sink import FENCE_PREFIX, StaleEpoch, fenced_put
from tests.conftest import TIMEOUT_SCALE, client_for

# Epochs are clock-derived (monotone across delete/recreate): large numbers, never 1, 2, 3.
EPOCH = 1_812_345_678_901
KEY = "segment_id"  # not "pk": the helper takes the table's own key name


@pytest.fixture(scope="module")
def table(ddb_local: LocalAws) -> str:
    """A sink table keyed by ``segment_id``, as a user's table would be."""
    name = f"sink-{uuid.uuid4().hex[:8]}"
    client = client_for(ddb_local, "dynamodb")
    client.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}])
    client.get_waiter("table_exists").wait(TableName=name)
    return name


def write(ddb: Any, table: str, conn: str, seq: int, epoch: int, by: str = "w",
          *, once: bool = True) -> bool:
    """One segment ``conn#seq``: write-once (a replay is refused) or overwriting."""
    item = {KEY: {"S": f"{conn}#{seq}"}, "epoch": {"N": str(epoch)}, "by": {"S": by}}
    return fenced_put(ddb, table, item, conn_id=conn, epoch=epoch, key=KEY,
                      condition="attribute_not_exists(#k)" if once else None,
                      names={"#k": KEY} if once else None)


def stored(ddb: Any, table: str, key: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = ddb.get_item(TableName=table, Key={KEY: {"S": key}},
                                                ConsistentRead=True).get("Item")
    return item


def test_a_lower_epoch_is_refused_and_nothing_written(ddb: Any, table: str,
                                                      unique_id: str) -> None:
    """A write below the conn_id's highest epoch raises StaleEpoch with that epoch; no item."""
    assert write(ddb, table, unique_id, 1, EPOCH + 5)
    with pytest.raises(StaleEpoch) as refused:
        write(ddb, table, unique_id, 2, EPOCH + 4)
    assert (refused.value.conn_id, refused.value.epoch, refused.value.seen) == (
        unique_id, EPOCH + 4, EPOCH + 5)
    assert stored(ddb, table, f"{unique_id}#2") is None


def test_equal_and_higher_epochs_are_accepted(ddb: Any, table: str, unique_id: str) -> None:
    """The holder writes again at its epoch; a successor's higher epoch raises the fence."""
    assert write(ddb, table, unique_id, 1, EPOCH)
    assert write(ddb, table, unique_id, 2, EPOCH)
    assert write(ddb, table, unique_id, 3, EPOCH + 10**6)
    fence = stored(ddb, table, f"{FENCE_PREFIX}{unique_id}")
    assert fence is not None and fence["epoch"] == {"N": str(EPOCH + 10**6)}
    assert write(ddb, table, f"{unique_id}-other", 1, EPOCH - 1)  # fences are per conn_id


def test_a_replay_is_reported_as_a_replay(ddb: Any, table: str, unique_id: str) -> None:
    """The same seq again (same or a successor's epoch) returns False, not StaleEpoch."""
    assert write(ddb, table, unique_id, 1, EPOCH, by="first")
    assert write(ddb, table, unique_id, 1, EPOCH, by="again") is False
    assert write(ddb, table, unique_id, 1, EPOCH + 1, by="successor") is False
    item = stored(ddb, table, f"{unique_id}#1")
    assert item is not None and item["by"] == {"S": "first"}
    fence = stored(ddb, table, f"{FENCE_PREFIX}{unique_id}")
    assert fence is not None and fence["epoch"] == {"N": str(EPOCH)}  # nothing moved it


def test_a_stale_replay_is_a_fence_refusal(ddb: Any, table: str, unique_id: str) -> None:
    """Both conditions failing is reported as StaleEpoch: the writer is stale either way."""
    assert write(ddb, table, unique_id, 1, EPOCH + 1)
    with pytest.raises(StaleEpoch):
        write(ddb, table, unique_id, 1, EPOCH)


@pytest.mark.parametrize("once", [True, False], ids=["write-once", "overwrite"])
def test_a_paused_holder_is_refused_after_its_successor_wrote(
        ddb: Any, table: str, unique_id: str, once: bool) -> None:
    """Holder A paused before writing seq 2; B takes over and writes 2, 3; A's write is refused."""
    old, new = EPOCH, EPOCH + 2_000  # B's acquisition: a later clock reading
    assert write(ddb, table, unique_id, 1, old, by="A", once=once)
    decided, resume = threading.Event(), threading.Event()
    outcome: list[object] = []

    def holder_a() -> None:
        decided.set()  # A has decided to write seq 2 ... and is paused (a GC, a stopped VM)
        resume.wait(10 * TIMEOUT_SCALE)
        try:
            outcome.append(write(ddb, table, unique_id, 2, old, by="A", once=once))
        except StaleEpoch as exc:
            outcome.append(exc)

    a = threading.Thread(target=holder_a)
    a.start()
    assert decided.wait(10 * TIMEOUT_SCALE)
    assert write(ddb, table, unique_id, 2, new, by="B", once=once)
    assert write(ddb, table, unique_id, 3, new, by="B", once=once)
    resume.set()
    a.join(10 * TIMEOUT_SCALE)
    (result,) = outcome
    assert isinstance(result, StaleEpoch) and result.seen == new, result
    by = {s: (stored(ddb, table, f"{unique_id}#{s}") or {}).get("by") for s in (1, 2, 3)}
    assert by == {1: {"S": "A"}, 2: {"S": "B"}, 3: {"S": "B"}}  # B's items stand


def test_a_table_with_a_sort_key_names_the_fence_key(ddb: Any, unique_id: str) -> None:
    """``fence=`` gives the fence item's full key when the table also has a sort key."""
    name = f"sink-sk-{uuid.uuid4().hex[:8]}"
    ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "p", "AttributeType": "S"},
                                           {"AttributeName": "s", "AttributeType": "N"}],
                     KeySchema=[{"AttributeName": "p", "KeyType": "HASH"},
                                {"AttributeName": "s", "KeyType": "RANGE"}])
    ddb.get_waiter("table_exists").wait(TableName=name)
    fence = {"p": {"S": f"{FENCE_PREFIX}{unique_id}"}, "s": {"N": "0"}}

    def put(seq: int, epoch: int) -> bool:
        return fenced_put(ddb, name, {"p": {"S": unique_id}, "s": {"N": str(seq)}},
                          conn_id=unique_id, epoch=epoch, fence=fence)

    assert put(1, EPOCH + 1)
    with pytest.raises(StaleEpoch):
        put(2, EPOCH)


def test_stale_epoch_survives_pickling_and_copying() -> None:
    """StaleEpoch crosses a process pool (pickled) and copy.copy with its fields and message
    (its own __init__ made both fail with a TypeError)."""
    import copy
    import pickle

    from holdfast.sink import StaleEpoch

    error = StaleEpoch("s1", 3, 5)
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert (again.conn_id, again.epoch, again.seen, str(again)) == (
            "s1", 3, 5, str(error))
