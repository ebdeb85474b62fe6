"""A held stream's item written over outside the protocol (``holdfast.core.overwrites``): told
apart from a release, and taken back by its holder, on DynamoDB Local and on moto."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core import rules
from holdfast.core.exceptions import LeaseLost, LossReason
from holdfast.core.overwrites import overwritten_holding
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
    """Owner and epoch gone: the holder and its epoch, to take it back."""
    found = overwritten_holding(HELD, _user_put("c1", lease_expires_at_ms={"N": "0"}))
    assert found is not None
    assert (found.conn_id, found.owner, found.epoch) == ("c1", "w1#a", 7)
    assert found.retake


def test_an_overwrite_on_another_url_is_not_to_take_back() -> None:
    """Another URL (another stream under the same id: our seqs are not its): its holder is
    to stop, not take it back; a STOPPED one on the same URL is taken back (to be released
    with its checkpoint)."""
    found = overwritten_holding(HELD, _user_put("c1", ws_url={"S": "ws://127.0.0.1:9/other"}))
    assert found is not None and not found.retake
    stopped = overwritten_holding(HELD, _user_put("c1", desired_state={"S": "STOPPED"}))
    assert stopped is not None and stopped.retake


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


def test_a_holding_whose_item_broke_the_schema_is_still_taken_back() -> None:
    """The old image need not parse (a mistyped attribute an app set on a held stream):
    its owner and epoch are read one by one."""
    broken = {**HELD, ATTR.single_connection: {"S": "yes"}}
    found = overwritten_holding(broken, _user_put("c1"))
    assert found is not None and (found.owner, found.epoch) == ("w1#a", 7)


def test_an_unowned_item_written_over_is_no_overwrite() -> None:
    """No holding before: nothing to take back (the router nudges it as before)."""
    before = {k: v for k, v in HELD.items() if k != ATTR.lease_owner}
    assert overwritten_holding(before, _user_put("c1")) is None


@pytest.mark.parametrize(("item", "reason"), [
    (_user_put("c1"), LossReason.OVERWRITTEN),
    (_user_put("c1", lease_epoch={"N": "3"}), LossReason.OVERWRITTEN),
    (_user_put("c1", desired_state={"S": "STOPPED"}), LossReason.OVERWRITTEN),
    ({**HELD, ATTR.lease_owner: None}, LossReason.LOST),  # released: the epoch kept
    ({**HELD, ATTR.lease_owner: {"S": "w2#b"}, ATTR.epoch: {"N": "8"}}, LossReason.LOST),
], ids=["no-epoch", "lower-epoch", "stopped", "released", "taken"])
def test_a_holder_refused_by_a_write_over_its_holding_is_told_so(
        item: dict[str, Any], reason: LossReason) -> None:
    """The holder's refused write reads OVERWRITTEN (its to take back) only for an item with
    no owner and an epoch gone or below its own (STOPPED too: taken back to be released);
    anything else is lost."""
    raw = {k: v for k, v in item.items() if v is not None}
    assert rules.classify_loss(raw, "w1#a", 7) is reason


def test_the_holder_takes_back_its_holding_and_keeps_the_apps_attributes(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """Owner, epoch and the holder's last stored checkpoint are written back, the app's
    weight stays, and the holder's next checkpoint lands as if nothing happened."""
    put_raw(ddb, store.table, unique_id, lease_expires_at_ms={"N": "0"})
    lease = store.renew(store.acquire(unique_id, "w1#a"), 41)
    ddb.put_item(TableName=store.table, Item=_user_put(
        unique_id, weight={"N": "2"}, lease_expires_at_ms={"N": "0"}))
    with pytest.raises(LeaseLost) as refused:
        store.renew(lease, 45)
    assert refused.value.reason is LossReason.OVERWRITTEN
    retaken = store.retake(lease)
    assert retaken is not None and not retaken[1]  # STARTED: it goes on
    taken = retaken[0]
    after = _get(ddb, store.table, unique_id)
    assert (after[ATTR.lease_owner], after[ATTR.epoch], after[ATTR.last_seq]) == (
        {"S": "w1#a"}, {"N": str(lease.epoch)}, {"N": "41"})  # its last stored one
    assert after[ATTR.weight] == {"N": "2"}
    assert store.retake(taken) is None  # a second take-back (an order twice): ours already
    store.renew(taken, 50)
    assert _get(ddb, store.table, unique_id)[ATTR.last_seq] == {"N": "50"}


def test_a_stopped_write_over_a_holding_is_taken_back_to_be_released(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """Written over as STOPPED: taken back, said STOPPED, and the holder's release then
    writes its final checkpoint (the write had removed it)."""
    put_raw(ddb, store.table, unique_id, lease_expires_at_ms={"N": "0"})
    lease = store.renew(store.acquire(unique_id, "w1#a"), 41)
    ddb.put_item(TableName=store.table, Item=_user_put(unique_id,
                                                       desired_state={"S": "STOPPED"}))
    retaken = store.retake(lease)
    assert retaken is not None and retaken[1]
    store.release(retaken[0], 45)
    after = _get(ddb, store.table, unique_id)
    assert ATTR.lease_owner not in after and after[ATTR.last_seq] == {"N": "45"}


def test_a_take_back_is_refused_once_the_stream_was_claimed_or_deleted(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """Claimed since (a claim sets owner and a higher epoch) or deleted: lost, nothing
    written over the new holder's."""
    put_raw(ddb, store.table, unique_id, lease_expires_at_ms={"N": "0"})
    lease = store.acquire(unique_id, "w1#a")
    ddb.put_item(TableName=store.table, Item=_user_put(unique_id,
                                                       lease_expires_at_ms={"N": "0"}))
    taken = store.acquire(unique_id, "w2#b")
    with pytest.raises(LeaseLost) as claimed:
        store.retake(lease)
    assert claimed.value.reason is LossReason.LOST
    assert _get(ddb, store.table, unique_id)[ATTR.lease_owner] == {"S": taken.owner}
    ddb.delete_item(TableName=store.table, Key={ATTR.pk: {"S": f"CONN#{unique_id}"}})
    with pytest.raises(LeaseLost) as deleted:
        store.retake(lease)
    assert deleted.value.reason is LossReason.DELETED
    assert _get(ddb, store.table, unique_id) == {}
