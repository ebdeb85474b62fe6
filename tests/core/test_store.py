"""Integration tests of every lease operation, on DynamoDB Local and on moto."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from holdfast.core import rules
from holdfast.core.anchor import Anchor
from holdfast.core.exceptions import AcquireFailed, LeaseLost, LossReason, StoreUnavailable
from holdfast.core.model import Lease
from holdfast.core.schema import ATTR
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream, set_desired_state
from tests.core.faults import drop_request, lose_response, replayed_after_a_lost_answer

LEASE_MS = 10_000
SKEW_MS = 1_000


class Clock:
    """A settable wall clock in milliseconds."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def put_raw(ddb: Any, table: str, conn_id: str, **attrs: Any) -> None:
    item = {"Pk": {"S": f"CONN#{conn_id}"}, "desired_state": {"S": "STARTED"},
            "ws_url": {"S": f"ws://127.0.0.1:9/s/{conn_id}"}}
    item.update(attrs)
    ddb.put_item(TableName=table, Item=item)


def test_acquire_user_inserted_item(store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """An item with only the seed attributes is acquired: owner, expiry, the clock as its first
    epoch, URL returned."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    assert lease.owner == "w1" and lease.epoch == store.clock()
    assert lease.expires_at_ms == store.clock() + LEASE_MS
    assert lease.ws_url.endswith(unique_id) and lease.last_seq is None


def test_acquire_returns_checkpoint_without_read(store: LeaseStore, ddb: Any,
                                                 unique_id: str) -> None:
    """The new owner learns last_seq from the acquire itself."""
    put_raw(ddb, store.table, unique_id, last_seq={"N": "41"}, lease_expires_at_ms={"N": "0"})
    assert store.acquire(unique_id, "w1").last_seq == 41


def test_acquire_writes_a_first_checkpoint_only_where_there_is_none(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """``first_checkpoint`` is the new stream's anchor, in the acquire's one write; a checkpoint
    already stored is kept (a holder's is the truth)."""
    fresh, used = f"{unique_id}-new", f"{unique_id}-used"
    put_raw(ddb, store.table, fresh)
    put_raw(ddb, store.table, used, last_seq={"N": "41"}, lease_expires_at_ms={"N": "0"})
    assert store.acquire(fresh, "w1", anchor=_anchor(6, fresh)).last_seq == 6
    assert store.get(fresh).last_seq == 6  # type: ignore[union-attr]
    assert store.acquire(used, "w1", anchor=_anchor(6, used)).last_seq == 41
    assert store.get(used).last_seq == 41  # type: ignore[union-attr]


def _anchor(seq: int, conn_id: str) -> Anchor:
    return Anchor(seq, f"ws://127.0.0.1:9/s/{conn_id}")  # put_raw's URL


@pytest.mark.parametrize("owned_by_us", [False, True])
def test_an_anchor_from_another_url_is_not_written(store: LeaseStore, ddb: Any,
                                                   unique_id: str, owned_by_us: bool) -> None:
    """The item's URL changed since its upstream was opened before the claim (or a forged
    nudge named another): the acquire goes ahead without that upstream's seq as the stream's
    first checkpoint, also when it takes back a stream of its own."""
    owner = {ATTR.lease_owner: {"S": "w1"}, ATTR.epoch: {"N": "1"}} if owned_by_us else {}
    put_raw(ddb, store.table, unique_id, **owner)
    lease = store.acquire(unique_id, "w1", anchor=Anchor(6, "ws://127.0.0.1:9/s/elsewhere"))
    assert lease.owner == "w1" and lease.last_seq is None
    assert store.get(unique_id).last_seq is None  # type: ignore[union-attr]


def test_an_anchor_from_another_url_is_removed_when_the_acquires_answer_was_lost(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """The anchored acquire landed but its answer was lost: taken back, its answer shows our
    own anchor as the checkpoint, for another URL: removed all the same."""
    put_raw(ddb, store.table, unique_id)
    with lose_response(ddb, "UpdateItem") as hits:
        lease = store.acquire(unique_id, "w1", anchor=Anchor(6, "ws://127.0.0.1:9/s/elsewhere"))
    assert hits and lease.owner == "w1" and lease.last_seq is None
    assert store.get(unique_id).last_seq is None  # type: ignore[union-attr]


def test_an_anchor_from_another_url_is_removed_when_botocore_replayed_the_acquire(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """The anchored acquire landed, its answer was lost and botocore sent it again: refused on
    our own write, adopted, the adopt's answer shows our anchor: removed all the same."""
    put_raw(ddb, store.table, unique_id)
    with replayed_after_a_lost_answer(ddb, "UpdateItem") as sent:
        lease = store.acquire(unique_id, "w1", anchor=Anchor(6, "ws://127.0.0.1:9/s/elsewhere"))
    assert sent == [200] and lease.owner == "w1" and lease.last_seq is None
    assert store.get(unique_id).last_seq is None  # type: ignore[union-attr]


@pytest.mark.parametrize("again", [None, 7])
def test_an_anchor_whose_removal_got_no_answer_is_removed_by_the_next_acquire(
        store: LeaseStore, ddb: Any, unique_id: str, again: int | None) -> None:
    """The removal of a wrong anchor got no answer: the acquire fails as unavailable (the
    stream is not started) and the store's next acquire of the stream removes the anchor,
    which it would have started from: the stray pass's (no anchor), or the returning nudge's
    (connected first again, its own anchor another seq)."""
    put_raw(ddb, store.table, unique_id)
    calls: list[int] = []

    def second_update_dropped(**_: Any) -> None:
        calls.append(1)
        if len(calls) == 2:  # the removal, right after the acquire
            raise EndpointConnectionError(endpoint_url="http://dropped-request")

    ddb.meta.events.register("before-call.dynamodb.UpdateItem", second_update_dropped)
    try:
        with pytest.raises(StoreUnavailable):
            store.acquire(unique_id, "w1", anchor=Anchor(6, "ws://127.0.0.1:9/s/elsewhere"))
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.UpdateItem", second_update_dropped)
    assert store.get(unique_id).last_seq == 6  # type: ignore[union-attr]
    lease = store.acquire(unique_id, "w1", anchor=None if again is None else Anchor(
        again, "ws://127.0.0.1:9/s/elsewhere"))
    assert lease.owner == "w1" and lease.last_seq is None
    assert store.get(unique_id).last_seq is None  # type: ignore[union-attr]


@pytest.mark.parametrize("first_seq", [0, 5])
def test_a_kept_anchor_that_never_landed_leaves_the_right_one_alone(
        store: LeaseStore, ddb: Any, unique_id: str, first_seq: int) -> None:
    """An anchored acquire for a stale URL never reached the table (kept, as it might land
    yet); the stream's next acquire, on its own URL, anchors it right: that anchor is kept in
    the table and in the lease (it was removed, or left out of the lease, and seqs skipped)."""
    put_raw(ddb, store.table, unique_id)
    with drop_request(ddb, "UpdateItem"), pytest.raises(StoreUnavailable):
        store.acquire(unique_id, "w1", anchor=Anchor(first_seq, "ws://127.0.0.1:9/s/stale"))
    lease = store.acquire(unique_id, "w1", anchor=_anchor(0, unique_id))
    assert lease.last_seq == 0 and store.get(unique_id).last_seq == 0  # type: ignore[union-attr]


def test_acquire_held_reports_holder(store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """A live lease cannot be taken; the failure names its holder from ALL_OLD."""
    put_raw(ddb, store.table, unique_id)
    store.acquire(unique_id, "w1")
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w2")
    assert info.value.reason is LossReason.HELD
    assert info.value.current is not None and info.value.current.lease_owner == "w1"


def test_acquire_expired_needs_skew_and_bumps_epoch(store: LeaseStore, clock: Clock, ddb: Any,
                                                    unique_id: str) -> None:
    """A stream in back-off is taken only past its retry time + skew, and the epoch rises."""
    put_raw(ddb, store.table, unique_id)
    first = store.acquire(unique_id, "w1")
    store.release(first, None, error="upstream down", retry_at_ms=clock.now + 5_000)
    clock.now += 5_000 + SKEW_MS - 1
    with pytest.raises(AcquireFailed):
        store.acquire(unique_id, "w2")
    clock.now += 1
    second = store.acquire(unique_id, "w2")
    assert second.epoch > first.epoch


@pytest.mark.parametrize("expiry", [0, 1, "past"])
def test_an_owned_stream_is_never_acquired_whatever_its_expiry(
        store: LeaseStore, clock: Clock, ddb: Any, unique_id: str, expiry: int | str) -> None:
    """A forced release (expiry 0 or past, owner kept) leaves the stream with its holder:
    only the holder or the reaper of a dead session may free it (finding 1)."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    value = clock.now - 60_000 if expiry == "past" else expiry
    ddb.update_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{unique_id}"}},
                    UpdateExpression="SET lease_expires_at_ms = :z",
                    ExpressionAttributeValues={":z": {"N": str(value)}})
    clock.now += 3_600_000
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w2")
    assert info.value.reason is LossReason.HELD
    item = store.get(unique_id)
    assert item is not None and item.lease_owner == "w1" and item.epoch == lease.epoch


def test_epoch_only_goes_up_across_delete_and_recreate(store: LeaseStore, clock: Clock,
                                                       ddb: Any, unique_id: str) -> None:
    """A stream deleted and created again gets a higher epoch than any it had (finding 3)."""
    put_raw(ddb, store.table, unique_id)
    first = store.acquire(unique_id, "w1")
    ddb.delete_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{unique_id}"}})
    clock.now += 1
    put_raw(ddb, store.table, unique_id)
    assert store.acquire(unique_id, "w2").epoch > first.epoch


def test_epoch_floor_is_the_stored_value_when_the_clock_is_behind(
        store: LeaseStore, clock: Clock, ddb: Any, unique_id: str) -> None:
    """An item whose stored epoch is ahead of the clock (a restore, a fast clock) gets
    stored + 1, never a lower value."""
    ahead = clock.now + 10_000_000
    put_raw(ddb, store.table, unique_id, lease_epoch={"N": str(ahead)})
    assert store.acquire(unique_id, "w1").epoch == ahead + 1


@pytest.mark.parametrize(("setup", "reason"), [
    ("stopped", LossReason.STOPPED), ("missing", LossReason.DELETED),
    ("backoff", LossReason.BACKOFF)])
def test_acquire_refusals(store: LeaseStore, ddb: Any, clock: Clock, unique_id: str, setup: str,
                          reason: LossReason) -> None:
    """STOPPED, deleted and backing-off items are refused with their own reason."""
    if setup == "stopped":
        put_raw(ddb, store.table, unique_id, desired_state={"S": "STOPPED"})
    elif setup == "backoff":
        put_raw(ddb, store.table, unique_id,
                lease_expires_at_ms={"N": str(clock.now + 60_000)}, status={"S": "BACKOFF"})
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w1")
    assert info.value.reason is reason


def test_acquire_does_not_create_items(store: LeaseStore, unique_id: str) -> None:
    """Acquiring an id that does not exist writes nothing."""
    with pytest.raises(AcquireFailed):
        store.acquire(unique_id, "w1")
    assert store.get_raw(unique_id) is None


def test_renew_extends_and_checkpoints(store: LeaseStore, clock: Clock, ddb: Any,
                                       unique_id: str) -> None:
    """Renew moves the expiry and last_seq in the same write."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    clock.now += 3_000
    renewed = store.renew(lease, 17)
    item = store.get(unique_id)
    assert item is not None
    assert item.lease_expires_at_ms == renewed.expires_at_ms == clock.now + LEASE_MS
    assert item.last_seq == renewed.last_seq == 17


def test_renew_never_moves_checkpoint_backwards(store: LeaseStore, ddb: Any,
                                                unique_id: str) -> None:
    """A lower handled seq than the stored checkpoint leaves last_seq alone."""
    put_raw(ddb, store.table, unique_id)
    lease = store.renew(store.acquire(unique_id, "w1"), 20)
    lease = store.renew(lease, 5)
    item = store.get(unique_id)
    assert item is not None and item.last_seq == 20 and lease.last_seq == 20


@pytest.mark.parametrize(("change", "reason"), [
    ("steal", LossReason.LOST), ("stop", LossReason.STOPPED), ("delete", LossReason.DELETED)])
def test_renew_tells_losses_apart(store: LeaseStore, clock: Clock, ddb: Any, unique_id: str,
                                  change: str, reason: LossReason) -> None:
    """Renew distinguishes a lease taken over, STOPPED and deleted."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    if change == "steal":
        store.release(lease)
        store.acquire(unique_id, "w2")
    elif change == "stop":
        assert set_desired_state(ddb, store.table, unique_id, "STOPPED")
    else:
        ddb.delete_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{unique_id}"}})
    with pytest.raises(LeaseLost) as info:
        store.renew(lease, 3)
    assert info.value.reason is reason


@pytest.mark.parametrize("owner", ["w1", "w2", None])
@pytest.mark.parametrize("epoch", [5, 6, None])
@pytest.mark.parametrize("state", ["STARTED", "STOPPED"])
def test_the_write_condition_and_the_read_back_judgement_agree(
        store: LeaseStore, ddb: Any, unique_id: str, owner: str | None, epoch: int | None,
        state: str) -> None:
    """A holder's renew lands exactly where ``rules.classify_loss`` judges the item still
    ours, and a refused one gives the reason the judgement gives."""
    attrs: dict[str, Any] = {ATTR.desired_state: {"S": state},
                             ATTR.lease_expires_at_ms: {"N": "0"}}
    if owner is not None:
        attrs[ATTR.lease_owner] = {"S": owner}
    if epoch is not None:
        attrs[ATTR.epoch] = {"N": str(epoch)}
    put_raw(ddb, store.table, unique_id, **attrs)
    raw = ddb.get_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{unique_id}"}})["Item"]
    judged = rules.classify_loss(raw, "w1", 5)
    lease = Lease(unique_id, "w1", 5, 0, f"ws://127.0.0.1:9/s/{unique_id}", None)
    try:
        store.renew(lease, 3)
    except LeaseLost as lost:
        assert lost.reason is judged is not None
    else:
        assert judged is None


@pytest.mark.parametrize("owner", ["w9#x", None])
@pytest.mark.parametrize("expired", [True, False])
@pytest.mark.parametrize("successor", [None, "w1", "w2"])
@pytest.mark.parametrize("state", ["STARTED", "STOPPED"])
def test_the_acquire_condition_and_claim_blocker_agree(
        store: LeaseStore, clock: Clock, ddb: Any, unique_id: str, owner: str | None,
        expired: bool, successor: str | None, state: str) -> None:
    """An acquire lands exactly where ``rules.claim_blocker`` (the router's and the claimer's
    judgement of an item) finds nothing in its way."""
    attrs: dict[str, Any] = {ATTR.desired_state: {"S": state}, ATTR.lease_expires_at_ms: {
        "N": str(clock.now - 5_000 if expired else clock.now + 5_000)}}
    if owner is not None:
        attrs[ATTR.lease_owner] = {"S": owner}
    if successor is not None:
        attrs[ATTR.successor] = {"S": successor}
    put_raw(ddb, store.table, unique_id, **attrs)
    item = store.get(unique_id)
    assert item is not None
    blocker = rules.claim_blocker(item, clock.now, SKEW_MS, "w1")
    try:
        store.acquire(unique_id, "w1")
    except AcquireFailed as failed:
        assert failed.reason is blocker is not None
    else:
        assert blocker is None


def test_stale_owner_same_id_is_fenced_by_epoch(store: LeaseStore, clock: Clock, ddb: Any,
                                                unique_id: str) -> None:
    """An old lease of the same owner id cannot renew after that owner re-acquired it."""
    put_raw(ddb, store.table, unique_id)
    old = store.acquire(unique_id, "w1")
    store.release(old)
    store.acquire(unique_id, "w1")
    with pytest.raises(LeaseLost) as info:
        store.renew(old, 1)
    assert info.value.reason is LossReason.LOST


def test_release_checkpoints_and_frees(store: LeaseStore, clock: Clock, ddb: Any,
                                       unique_id: str) -> None:
    """Release writes the final checkpoint, expiry 0 and no owner; another worker takes it."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    assert store.release(lease, 9) is None
    item = store.get(unique_id)
    assert item is not None
    assert (item.lease_owner, item.lease_expires_at_ms, item.last_seq, item.status) == (
        None, 0, 9, "RELEASED")
    assert store.acquire(unique_id, "w2").last_seq == 9


@pytest.mark.parametrize("desired_state", ["STARTED", "STOPPED"])
def test_a_release_under_a_checkpoint_moved_past_ours_frees_the_stream_keeping_it(
        store: LeaseStore, ddb: Any, unique_id: str, desired_state: str) -> None:
    """Someone moved the stored checkpoint past ours while we held the stream (started or
    stopped since): the release still frees it, keeping their checkpoint, and says released;
    it is not left owned by a holder that has ended."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    ddb.update_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{unique_id}"}},
                    UpdateExpression="SET last_seq = :s, desired_state = :d",
                    ExpressionAttributeValues={":s": {"N": "100"}, ":d": {"S": desired_state}})
    assert store.release(lease, 7) is None
    item = store.get(unique_id)
    assert item is not None and (item.lease_owner, item.last_seq) == (None, 100)


def test_release_by_stale_owner_changes_nothing(store: LeaseStore, clock: Clock, ddb: Any,
                                                unique_id: str) -> None:
    """A stale holder's release fails and leaves the new owner's lease intact."""
    put_raw(ddb, store.table, unique_id)
    old = store.acquire(unique_id, "w1")
    store.release(old)
    new = store.acquire(unique_id, "w2")
    assert store.release(old, 100) is LossReason.LOST
    item = store.get(unique_id)
    assert item is not None and item.lease_owner == "w2" and item.epoch == new.epoch
    assert item.last_seq is None


def test_give_up_release_records_error_and_delays(store: LeaseStore, clock: Clock, ddb: Any,
                                                  unique_id: str) -> None:
    """A give-up release records the error and blocks claims until the retry time; a clean
    release later clears it."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    retry_at = clock.now + 30_000
    store.release(lease, None, error="upstream refused: 403", retry_at_ms=retry_at)
    item = store.get(unique_id)
    assert item is not None
    assert (item.status, item.last_error, item.error_count, item.lease_expires_at_ms) == (
        "BACKOFF", "upstream refused: 403", 1, retry_at)
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w2")
    assert info.value.reason is LossReason.BACKOFF
    clock.now = retry_at + SKEW_MS
    again = store.acquire(unique_id, "w2")
    assert again.error_count == 1
    # A clean release after it ends the streak, its text with it (`ls` showed the old error
    # beside a stop as if it were the stop's reason).
    store.release(again, None)
    item = store.get(unique_id)
    assert item is not None
    assert (item.status, item.last_error, item.error_count) == ("RELEASED", None, 0)


def test_give_up_error_never_stores_url_secrets(store: LeaseStore, ddb: Any,
                                                unique_id: str) -> None:
    """Whatever error text a give-up carries, last_error keeps none of the ws_url's secrets."""
    url = "wss://u:pass-secret@h.example/tok/path-secret;sid=matrix-secret?t=query-secret"
    put_raw(ddb, store.table, unique_id, ws_url={"S": url})
    lease = store.acquire(unique_id, "w1")
    store.release(lease, None, error=f"InvalidURI: {url} isn't valid (query-secret)",
                  retry_at_ms=store.clock() + 1000)
    item = store.get(unique_id)
    assert item is not None and item.last_error is not None
    assert item.last_error.startswith("InvalidURI: wss://h.example/<")
    assert "secret" not in item.last_error


def test_lost_acquire_response_is_resolved(store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """An acquire that landed but whose answer was lost is recognised as ours on re-read."""
    put_raw(ddb, store.table, unique_id)
    with lose_response(ddb, "UpdateItem") as hits:
        lease = store.acquire(unique_id, "w1")
    assert hits and lease.owner == "w1" and lease.epoch > store.clock()
    item = store.get(unique_id)
    assert item is not None and item.lease_owner == "w1" and item.epoch == lease.epoch


def test_own_stream_left_owned_is_taken_back_under_a_new_epoch(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """A stream our session still owns but does not hold (its release failed, an answer was
    lost and the re-read too) is acquired again, under a higher epoch (finding 2)."""
    put_raw(ddb, store.table, unique_id)
    first = store.acquire(unique_id, "w1#a")
    again = store.acquire(unique_id, "w1#a")
    assert again.epoch > first.epoch and again.owner == "w1#a"
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w2#b")
    assert info.value.reason is LossReason.HELD


def test_unsent_acquire_is_unknown_not_owned(store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """An acquire that never reached DynamoDB raises StoreUnavailable; nothing is held."""
    put_raw(ddb, store.table, unique_id)
    with drop_request(ddb, "UpdateItem"), pytest.raises(StoreUnavailable):
        store.acquire(unique_id, "w1")
    item = store.get(unique_id)
    assert item is not None and item.lease_owner is None


def test_lost_renew_response_is_success(store: LeaseStore, clock: Clock, ddb: Any,
                                        unique_id: str) -> None:
    """A renew that landed but timed out counts as renewed after the re-read."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    clock.now += 1_000
    with lose_response(ddb, "UpdateItem"):
        renewed = store.renew(lease, 4)
    assert renewed.expires_at_ms == clock.now + LEASE_MS and renewed.last_seq == 4


def test_unsent_renew_keeps_lease_unknown(store: LeaseStore, clock: Clock, ddb: Any,
                                          unique_id: str) -> None:
    """A renew that never landed is an unknown outcome (retry), not a lost lease."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    with drop_request(ddb, "UpdateItem"), pytest.raises(StoreUnavailable):
        store.renew(lease, 4)
    assert store.renew(lease, 4).last_seq == 4


def test_lost_release_response_is_done(store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """A release whose answer was lost is confirmed by the re-read."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    with lose_response(ddb, "UpdateItem"):
        assert store.release(lease, 2) is None
    item = store.get(unique_id)
    assert item is not None and item.lease_owner is None and item.last_seq == 2


def test_a_replayed_handoff_release_is_done_once_the_named_successor_holds_it(
        store: LeaseStore, ddb: Any, clock: Clock, unique_id: str) -> None:
    """botocore's retry of a handoff release that landed finds the successor's lease: done."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    assert store.release(lease, 2, successor="w2") is None
    clock.now += 1
    store.acquire(unique_id, "w2")
    assert store.release(lease, 2, successor="w2") is None  # the replay
    assert store.release(lease, 2, successor="w3") is LossReason.LOST  # not the one it named


def test_malformed_item_is_quarantined_not_fatal(store: LeaseStore, ddb: Any, clock: Clock,
                                                 unique_id: str) -> None:
    """A STARTED item with a bad attribute fails acquire as INVALID and is parked with a reason."""
    put_raw(ddb, store.table, unique_id, ws_url={"N": "12"})
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w1")
    assert info.value.reason is LossReason.INVALID
    raw = store.get_raw(unique_id)
    assert raw is not None and raw["status"]["S"] == "INVALID"
    assert "ws_url" in raw["last_error"]["S"] and "lease_owner" not in raw
    assert int(raw["lease_expires_at_ms"]["N"]) > clock.now


@pytest.mark.parametrize(("attr", "value", "reason"), [
    ("lease_epoch", {"S": "one"}, "lease_epoch must be a number"),
    ("single_connection", {"S": "yes"}, "single_connection must be a boolean"),
    ("lease_epoch", {"NULL": True}, "lease_epoch is NULL"),
    ("last_seq", {"NULL": True}, "last_seq is NULL")])
def test_a_mistyped_attribute_is_quarantined(store: LeaseStore, ddb: Any, unique_id: str,
                                             attr: str, value: Any, reason: str) -> None:
    """An epoch stored as a string makes the acquire fail: reported as INVALID and the item
    quarantined (out of the sweep's sight with the reason), not nudged and counted for ever;
    the same for ``single_connection`` as the string "yes", not claimed with the fleet
    default (which may let a second connection open, the very thing it forbids); and a NULL
    epoch or checkpoint (boto3's resource layer writes None so), which the conditions do not
    read as absent: the stream was never claimed, or every checkpoint refused, and nothing
    said why."""
    put_raw(ddb, store.table, unique_id, **{attr: value})
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w1")
    assert info.value.reason is LossReason.INVALID
    raw = store.get_raw(unique_id)
    assert raw is not None and raw["status"] == {"S": "INVALID"} and "lease_owner" not in raw
    assert reason in raw["last_error"]["S"]


def test_a_held_stream_whose_desired_state_is_mistyped_is_parked_by_its_holder(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """``desired_state`` typed "stopped" over a held stream: its holder's next claim of its
    own stray parks it INVALID with the reason (before, the STARTED condition refused the
    park, the owner stayed, and every claim said "parked" again, for ever)."""
    put_raw(ddb, store.table, unique_id, lease_expires_at_ms={"N": "0"})
    store.acquire(unique_id, "w1")
    ddb.update_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{unique_id}"}},
                    UpdateExpression="SET desired_state = :s",
                    ExpressionAttributeValues={":s": {"S": "stopped"}})  # an app's typo
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w1")
    assert info.value.reason is LossReason.INVALID and info.value.parked
    raw = store.get_raw(unique_id)
    assert raw is not None and raw["status"] == {"S": "INVALID"} and "lease_owner" not in raw
    assert "desired_state must be STARTED or STOPPED" in raw["last_error"]["S"]


def test_a_malformed_stopped_item_is_not_parked_and_says_so(
        store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """A STOPPED item is never parked (an operator's stop stands): the refusal says the
    item was not written."""
    put_raw(ddb, store.table, unique_id, desired_state={"S": "STOPPED"}, ws_url={"N": "1"})
    with pytest.raises(AcquireFailed) as info:
        store.acquire(unique_id, "w1")
    assert info.value.reason is LossReason.INVALID and not info.value.parked
    raw = store.get_raw(unique_id)
    assert raw is not None and "status" not in raw


def test_normalise_only_items_without_expiry(store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """normalise sets expiry 0 once on a never-claimed item and leaves others alone."""
    put_raw(ddb, store.table, unique_id)
    assert store.normalise(unique_id) is True
    assert store.normalise(unique_id) is False
    assert store.normalise(unique_id + "-missing") is False
    item = store.get(unique_id)
    assert item is not None and item.lease_expires_at_ms == 0


def test_create_stream_is_seed_schema(store: LeaseStore, ddb: Any, unique_id: str) -> None:
    """create_stream inserts a STARTED item visible to the orphan index, once."""
    assert create_stream(ddb, store.table, unique_id, "ws://127.0.0.1:9/s/x")
    assert not create_stream(ddb, store.table, unique_id, "ws://127.0.0.1:9/s/y")
    item = store.get(unique_id)
    assert item is not None and item.started and item.lease_expires_at_ms == 0


def test_renewal_overtaken_by_our_own_later_renewal(store: LeaseStore, clock: Clock, ddb: Any,
                                                    unique_id: str) -> None:
    """An older renewal landing after a newer one of the same holder succeeds without shortening."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    clock.now += 2_000
    newer = store.renew(lease, 5)
    clock.now -= 1_000  # the older renewal was computed earlier and lands late
    older = store.renew(lease, 3)
    item = store.get(unique_id)
    assert item is not None and item.lease_expires_at_ms == newer.expires_at_ms
    assert older.expires_at_ms == newer.expires_at_ms and item.last_seq == 5


def test_checkpoint_moved_past_ours_is_regression(store: LeaseStore, clock: Clock, ddb: Any,
                                                  unique_id: str) -> None:
    """A stored checkpoint ahead of the holder's (someone edited it) is reported as REGRESSION."""
    put_raw(ddb, store.table, unique_id)
    lease = store.acquire(unique_id, "w1")
    ddb.update_item(TableName=store.table, Key={"Pk": {"S": f"CONN#{unique_id}"}},
                    UpdateExpression="SET last_seq = :s", ExpressionAttributeValues={
                        ":s": {"N": "100"}})
    clock.now += 1_000
    with pytest.raises(LeaseLost) as info:
        store.renew(lease, 7)
    assert info.value.reason is LossReason.REGRESSION
