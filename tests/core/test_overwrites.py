"""A held stream's item written over outside the protocol (``holdfast.core.overwrites``): told
apart from a release, and put back, on DynamoDB Local and on moto."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.overwrites import PROTOCOL_ATTRIBUTES, overwritten_holding
from holdfast.core.schema import ATTR
from holdfast.core.store import LeaseStore
from tests.core.test_store import put_raw


def _get(ddb: Any, table: str, conn_id: str) -> dict[str, Any]:
    return dict(ddb.get_item(TableName=table, Key={ATTR.pk: {"S": f"CONN#{conn_id}"}},
                             ConsistentRead=True).get("Item") or {})


def _user_put(conn_id: str, **attrs: Any) -> dict[str, Any]:
    """The app's whole item, as it inserted it."""
    return {ATTR.pk: {"S": f"CONN#{conn_id}"}, ATTR.desired_state: {"S": "STARTED"},
            ATTR.ws_url: {"S": f"ws://127.0.0.1:9/s/{conn_id}"}, **attrs}


HELD = {**_user_put("c1"), ATTR.lease_owner: {"S": "w1#a"}, ATTR.epoch: {"N": "7"},
        ATTR.lease_expires_at_ms: {"N": "5000"}, ATTR.last_seq: {"N": "41"},
        ATTR.status: {"S": "RUNNING"}}


def test_a_put_of_the_whole_item_over_a_holding_is_an_overwrite() -> None:
    """Owner and epoch gone: the holding as it was, to put back, and what the write added."""
    found = overwritten_holding(HELD, _user_put("c1", lease_expires_at_ms={"N": "0"},
                                                weight={"N": "2"}))
    assert found is not None
    assert (found.conn_id, found.owner, found.epoch, found.last_seq) == ("c1", "w1#a", 7, 41)
    assert dict(found.put_back) == {a: HELD[a] for a in PROTOCOL_ATTRIBUTES if a in HELD}
    assert found.removes == () and found.started


@pytest.mark.parametrize("after", [
    # The holder's release: owner removed, epoch kept (expiry 0, RELEASED).
    {**HELD, ATTR.lease_owner: None, ATTR.lease_expires_at_ms: {"N": "0"},
     ATTR.status: {"S": "RELEASED"}},
    # A checkpoint or renewal: owner kept.
    {**HELD, ATTR.last_seq: {"N": "50"}},
    # A transfer: another owner, a higher epoch.
    {**HELD, ATTR.lease_owner: {"S": "w2#b"}, ATTR.epoch: {"N": "8"}},
], ids=["release", "checkpoint", "transfer"])
def test_the_protocols_own_writes_are_no_overwrite(after: dict[str, Any]) -> None:
    """A release keeps the epoch, a checkpoint the owner, a transfer raises the epoch."""
    new = {k: v for k, v in after.items() if v is not None}
    assert overwritten_holding(HELD, new) is None


def test_an_unowned_item_written_over_is_no_overwrite() -> None:
    """No holding before: nothing to put back (the router nudges it as before)."""
    before = {k: v for k, v in HELD.items() if k != ATTR.lease_owner}
    assert overwritten_holding(before, _user_put("c1")) is None


def test_a_stopping_write_over_a_holding_is_an_overwrite_to_stop() -> None:
    """Written over as STOPPED: put back too, so its holder stops it with its checkpoint."""
    found = overwritten_holding(HELD, _user_put("c1", desired_state={"S": "STOPPED"},
                                                status={"S": "x"}))
    assert found is not None and not found.started


def test_put_back_restores_the_holding_and_keeps_the_apps_attributes(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """The owner, epoch, expiry and checkpoint come back; the app's new URL and weight stay;
    what the write added of the protocol's (a status) is removed."""
    put_raw(ddb, store.table, unique_id, lease_expires_at_ms={"N": "0"})
    lease = store.acquire(unique_id, "w1#a")
    lease = store.renew(lease, 41)
    held = _get(ddb, store.table, unique_id)
    ddb.put_item(TableName=store.table, Item=_user_put(
        unique_id, ws_url={"S": "ws://127.0.0.1:9/new"}, weight={"N": "2"},
        lease_expires_at_ms={"N": "0"}, error_count={"N": "3"}))
    found = overwritten_holding(held, _get(ddb, store.table, unique_id))
    assert found is not None
    assert store.put_back(found)
    after = _get(ddb, store.table, unique_id)
    assert {a: after.get(a) for a in PROTOCOL_ATTRIBUTES} == {
        a: held.get(a) for a in PROTOCOL_ATTRIBUTES}
    assert after[ATTR.ws_url] == {"S": "ws://127.0.0.1:9/new"}
    assert after[ATTR.weight] == {"N": "2"}
    store.renew(lease, 45)  # the holder goes on as if nothing happened
    assert _get(ddb, store.table, unique_id)[ATTR.last_seq] == {"N": "45"}


def test_put_back_is_refused_once_the_stream_was_claimed_or_deleted(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """Claimed since (a claim sets owner and a higher epoch) or deleted: False, nothing
    written over the new holder's."""
    put_raw(ddb, store.table, unique_id, lease_expires_at_ms={"N": "0"})
    store.acquire(unique_id, "w1#a")
    held = _get(ddb, store.table, unique_id)
    ddb.put_item(TableName=store.table, Item=_user_put(unique_id,
                                                       lease_expires_at_ms={"N": "0"}))
    found = overwritten_holding(held, _get(ddb, store.table, unique_id))
    assert found is not None
    taken = store.acquire(unique_id, "w2#b")
    assert not store.put_back(found)
    assert _get(ddb, store.table, unique_id)[ATTR.lease_owner] == {"S": taken.owner}
    ddb.delete_item(TableName=store.table, Key={ATTR.pk: {"S": f"CONN#{unique_id}"}})
    assert not store.put_back(found)
    assert _get(ddb, store.table, unique_id) == {}
