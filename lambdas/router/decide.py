"""The router's decision for one stream record: a pure function of (event, old, new, now).

A STARTED item needs a nudge when a change leaves it with no live owner:

    INSERT of a STARTED item without owner                       -> nudge "inserted" (with its
                                                                    URL if it may be connected
                                                                    before its claim and the
                                                                    record is fresh)
    MODIFY STOPPED -> STARTED, no owner                          -> nudge "started"
    MODIFY owner -> no owner, expiry 0 (a release)               -> nudge "released"
    MODIFY owner -> no owner, successor named (a handoff)        -> nudge "handoff" to the
                                                                    successor's order queue now,
                                                                    and to the shared queue once
                                                                    the hold ends (the fallback)
    MODIFY owner -> no owner, status BACKOFF (a give-up)         -> nudge "gave_up", delayed
                                                                    until retry time + skew
    MODIFY owner -> no owner, status INVALID (quarantine)        -> nudge "quarantined", delayed
    MODIFY no owner -> no owner, not claimable -> claimable      -> nudge "rearmed" (an operator
                                                                    cleared a back-off)
    MODIFY whose old image is missing or malformed, no owner     -> nudge "changed" (cannot tell
                                                                    what changed; a spare nudge
                                                                    costs one failed acquire)
    expiry became 0, owner left in place (the seed's             -> order "release" to the owner:
      release_lease, an operator's forced handover)                 it stops delivering and
                                                                    releases (then "released");
                                                                    a gone owner is released
    MODIFY STOPPED -> STARTED, an owner left in place            -> skip "owned": its live
                                                                    holder's release is nudged;
                                                                    a gone owner's stream is
                                                                    freed by the owner audit
    MODIFY -> STOPPED while owned (a stop of a held stream)      -> order "stop" to the owner
    MODIFY owner -> no owner, epoch gone or lowered (a write     -> order "retake" to the
      outside the protocol: an app's PutItem of the whole item)     owner, no nudge: it writes
                                                                    its holding back
                                                                    (``core.overwrites``),
                                                                    then stops it if it is
                                                                    STOPPED; held out of
                                                                    claims meanwhile (before
                                                                    any nudge); "stop" if it
                                                                    names another URL
    REMOVE of an owned item (``holdfast rm`` of a held stream)   -> order "stop" to the owner
      (also with an image otherwise malformed: the order is
      built from its raw key, owner and epoch, and the record
      is counted as malformed)
    anything else with an owner (heartbeat, checkpoint, acquire,
      a later write to an item already freed by the same owner)  -> skip "owned"
    new image not STARTED (STARTED -> STOPPED, ...)              -> skip "not_started"
    REMOVE (delete, TTL delete)                                  -> skip "removed"
    no owner before and after, nothing newly claimable           -> skip "unchanged"/"normalised"
    an item held for its holder's take-back written again        -> skip "held", held again
      before the take-back landed                                   until the same end

The router never frees an owned stream: only its holder (told by an order) or the reaper of a
dead session may (``docs/concepts/protocol.md``). A stream whose owner is not a live session is the
sweeper's (its owner audit, ``holdfast.core.liveness``, within 2 s for a gone session).

A STARTED, unowned item without ``lease_expires_at_ms`` is invisible to the sweeper's index, so
the decision also asks for ``normalise`` (set it to 0). That normalising write produces a MODIFY
(no expiry -> 0, no owner) which is skipped as "normalised": the record that caused it has
already nudged (or ordered a holder written over to take it back: the sweeper's index then
finds the stream should that holder be gone), so it causes no second nudge. A back-off
longer than SQS's 15-minute maximum delay is left to the sweeper ("deferred"). A new image
that breaks the schema is "malformed": logged, counted and skipped, never retried, so it
cannot block the shard (one that is STOPPED and names an owner still gets its stop order,
from the raw attributes, as a deleted one does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from holdfast.core import rules
from holdfast.core.exceptions import MalformedItem
from holdfast.core.judgements import parse_or_none
from holdfast.core.model import (
    MAX_OWNER_LEN,
    LeaseItem,
    bool_attr,
    connects_before_claim,
    int_attr,
    str_attr,
    validate_conn_id,
)
from holdfast.core.nudge import MAX_URL_CHARS, URL_FRESH_MS, nudge_delay_s
from holdfast.core.overwrites import overwritten_holding, take_back_hold
from holdfast.core.schema import ATTR, STOPPED, LeaseStatus, conn_id_from_pk
from holdfast.lambdas.router.decision import Decision, Outcome, Reason

__all__ = ["Decision", "Outcome", "Reason", "decide"]

Image = Mapping[str, Any]
# An inserted nudge carries its URL only for a record this fresh: a record read long after
# its write (a lagging shard, a batch retried again and again) is of a stream that may be held
# already, and a connect before its claim would cost its upstream a connection for nothing
# (``holdfast.core.nudge.url_if_fresh`` is the worker's side of the rule, for a redelivered
# message). The record's time is whole seconds on DynamoDB and whole minutes on DynamoDB Local
# (measured), so the bound is a minute: it leaves out lag, not the ordinary path.
RECORD_FRESH_MS = 60_000 + URL_FRESH_MS


def decide(event_name: str | None, old_image: Image | None, new_image: Image | None,
           now_ms: int, *, skew_ms: int = rules.DEFAULT_SKEW_MS,
           lease_ms: int = rules.DEFAULT_LEASE_MS, created_ms: int | None = None) -> Decision:
    """Decide for one stream record (low-level DynamoDB JSON images); never raises.
    ``created_ms``: the record's ``ApproximateCreationDateTime``, if known; ``lease_ms``: the
    session TTL."""
    for name, given in (("OldImage", old_image), ("NewImage", new_image)):
        if given is not None and not isinstance(given, Mapping):
            # A hand-built or corrupted record: its own verdict, not the batch's exception.
            return _malformed(None, f"{name} is a {type(given).__name__}, not a map")
    if event_name == "REMOVE":
        gone = parse_or_none(old_image)
        if gone is not None and gone.lease_owner is not None:
            return Decision(Outcome.ORDER, Reason.STOP, gone.conn_id, gone.epoch,
                            owner=gone.lease_owner)
        if gone is None and old_image:
            return _stop_raw(old_image, "deleted") or Decision(
                Outcome.SKIP, Reason.REMOVED, _conn_id_or_none(old_image))
        return Decision(Outcome.SKIP, Reason.REMOVED, _conn_id_or_none(old_image))
    if event_name not in ("INSERT", "MODIFY"):
        return _malformed(new_image, f"unknown eventName {str(event_name)[:40]!r}")
    if not new_image:
        return _malformed(old_image, "record has no NewImage (the stream view type must be "
                                     "NEW_AND_OLD_IMAGES)")
    try:
        new = LeaseItem.from_ddb(new_image)
    except MalformedItem as bad:
        stopped = str_attr(new_image, ATTR.desired_state) == STOPPED
        return (stopped and _stop_raw(new_image, f"stopped: {bad.reason}")) or _malformed(
            new_image, bad.reason)
    overwrite = overwritten_holding(old_image, new_image) if event_name == "MODIFY" else None
    if overwrite is not None:  # never a release: the holder may still be delivering
        # Held out of every claim until its holder's take-back lands (a sweeper's nudge or a
        # reconcile would make a second deliverer), for a session TTL: a live holder hears
        # within a heartbeat, a dead one's stream is claimable when its session would have
        # expired. A STOPPED one too: the app may start it again before the take-back. Not
        # from a record read late: it could hold a stream released since.
        hold = now_ms + lease_ms if overwrite.retake and _fresh(now_ms, created_ms) else None
        # Else normalised (the write may have left no expiry): should its holder be gone, the
        # sweeper's index finds the stream.
        return Decision(Outcome.ORDER, Reason.RETAKE if overwrite.retake else Reason.STOP,
                        new.conn_id, overwrite.epoch, owner=overwrite.owner,
                        normalise=new.started and new.lease_expires_at_ms is None,
                        hold_until_ms=hold)
    held_until = take_back_hold(old_image, now_ms, skew_ms) if event_name == "MODIFY" else None
    if (held_until is not None and new.lease_owner is None and ATTR.status not in new_image
            and (new.lease_expires_at_ms or 0) < held_until):
        # Written over again (or set STARTED again) before its holder took it back: held
        # again until the same end, and no nudge (a claim now would be a second deliverer).
        return Decision(Outcome.SKIP, Reason.HELD, new.conn_id, new.epoch,
                        hold_until_ms=held_until)
    if not new.started:
        old_state = parse_or_none(old_image)
        if new.lease_owner is not None and (old_state is None or old_state.started):
            # Its holder learns of the stop from its session's next heartbeat, not from a
            # per-stream write that may be a checkpoint interval away.
            return Decision(Outcome.ORDER, Reason.STOP, new.conn_id, new.epoch,
                            owner=new.lease_owner)
        return Decision(Outcome.SKIP, Reason.NOT_STARTED, new.conn_id, new.epoch)
    if new.lease_owner is not None:
        return _owned(event_name, old_image, new, now_ms, skew_ms)
    normalise = new.lease_expires_at_ms is None
    if event_name == "INSERT":
        decision = _nudge(new, Reason.INSERTED, now_ms, skew_ms, normalise)
        return _inserted(decision, new, new_image) if _fresh(now_ms, created_ms) else decision
    old = parse_or_none(old_image)
    if old is None:
        return _nudge(new, Reason.CHANGED, now_ms, skew_ms, normalise)
    if not old.started:
        return _nudge(new, Reason.STARTED, now_ms, skew_ms, normalise)
    if old.lease_owner is not None:
        # A release that stamped moved_at_ms is a rebalancing move (holdfast.core.nudge).
        moved_at = int_attr(new_image, ATTR.moved_at_ms)
        moved = moved_at is not None and moved_at != int_attr(old_image or {},
                                                              ATTR.moved_at_ms)
        if new.successor is not None and new.status == LeaseStatus.RELEASED:
            # The successor is told at once; the shared nudge waits for the hold's end.
            return dataclasses.replace(_nudge(new, Reason.HANDOFF, now_ms, skew_ms, normalise),
                                       successor=new.successor)
        return _nudge(new, Reason.MOVED if moved else _release_reason(new), now_ms, skew_ms,
                      normalise)
    if old.lease_expires_at_ms is None and new.lease_expires_at_ms is not None:
        # Our own normalisation (or an equivalent edit): the record that led to it nudged.
        return Decision(Outcome.SKIP, Reason.NORMALISED, new.conn_id, new.epoch)
    if (not rules.is_expired(old.lease_expires_at_ms, now_ms, skew_ms)
            and rules.is_expired(new.lease_expires_at_ms, now_ms, skew_ms)):
        return _nudge(new, Reason.REARMED, now_ms, skew_ms, normalise)
    return Decision(Outcome.SKIP, Reason.UNCHANGED, new.conn_id, new.epoch, normalise=normalise)


def _owned(event_name: str, old_image: Image | None, new: LeaseItem, now_ms: int,
           skew_ms: int) -> Decision:
    """A STARTED item that names an owner: mostly a heartbeat, checkpoint or acquisition."""
    owner = new.lease_owner
    assert owner is not None
    old = parse_or_none(old_image) if event_name == "MODIFY" else None
    # Restarted while an old owner is still named (its holder still draining the stop, or its
    # worker dead while stopped): the holder's release is nudged, a gone owner's stream is
    # released by the sweeper's owner audit; nothing for the router to write.
    if new.lease_expires_at_ms == 0 and not (
            old is not None and old.lease_expires_at_ms == 0 and old.lease_owner == owner):
        # Expiry 0 with the owner kept (the seed's release, an operator's forced handover):
        # the holder may still be delivering, so it is told to let go, never bypassed. A later
        # write to an item already forced by the same owner is skipped (no second order).
        return Decision(Outcome.ORDER, Reason.RELEASE, new.conn_id, new.epoch, owner=owner)
    # Heartbeats, checkpoints and acquisitions: someone holds it (or will be swept).
    return Decision(Outcome.SKIP, Reason.OWNED, new.conn_id, new.epoch)


def _release_reason(new: LeaseItem) -> Reason:
    if new.status == LeaseStatus.BACKOFF:
        return Reason.GAVE_UP
    if new.status == LeaseStatus.INVALID:
        return Reason.QUARANTINED
    return Reason.RELEASED


def _fresh(now_ms: int, created_ms: int | None) -> bool:
    return created_ms is None or now_ms - created_ms <= RECORD_FRESH_MS


def _nudge(new: LeaseItem, reason: Reason, now_ms: int, skew_ms: int,
           normalise: bool) -> Decision:
    expires = new.lease_expires_at_ms
    delay_s = 0
    if not rules.is_expired(expires, now_ms, skew_ms):
        assert expires is not None  # is_expired(None, ...) is True
        # Claimable once a challenger's clock passes expiry + skew (the acquire condition).
        wait_ms = rules.claimable_at_ms(expires, skew_ms) - now_ms
        delay = nudge_delay_s(wait_ms)
        if delay is None:
            return Decision(Outcome.SKIP, Reason.DEFERRED, new.conn_id, new.epoch,
                            detail=f"claimable in {wait_ms // 1000} s; the sweeper nudges it")
        delay_s = delay
    return Decision(Outcome.NUDGE, reason, new.conn_id, new.epoch, delay_s, normalise)


def _inserted(decision: Decision, new: LeaseItem, new_image: Image) -> Decision:
    """A new item's nudge carries its URL when it is claimable now and may be connected
    before its claim (``connects_before_claim``; the worker applies its fleet default where
    the item is silent, and its URL rules)."""
    if (decision.outcome is not Outcome.NUDGE or decision.delay_s
            or not connects_before_claim(new, bool_attr(new_image, ATTR.single_connection),
                                         fleet_default=False)
            or len(new.ws_url) > MAX_URL_CHARS):
        return decision
    return dataclasses.replace(decision, ws_url=new.ws_url)


def _raw_conn_id(image: Image | None) -> str | None:
    """The connection id in the image's key, whole (None: no such key)."""
    raw = image.get(ATTR.pk) if image else None
    pk = raw.get("S") if isinstance(raw, Mapping) else None
    try:
        return conn_id_from_pk(pk) if isinstance(pk, str) else None
    except ValueError:
        return None


def _conn_id_or_none(image: Image | None) -> str | None:
    """The id a decision reports (cut to 200 characters: a log field, not an address)."""
    conn_id = _raw_conn_id(image)
    return None if conn_id is None else conn_id[:200]


def _valid_conn_id(image: Image) -> str | None:
    """The image's connection id, whole, if it is a valid one (else None)."""
    try:
        conn_id = _raw_conn_id(image)
        return None if conn_id is None else validate_conn_id(conn_id)
    except ValueError:
        return None


def _stop_raw(image: Image, why: str) -> Decision | None:
    """A stop order for an item deleted or STOPPED whose image is otherwise malformed, built
    from the raw key, owner and epoch: its holder must still hear of it within a second, not
    at its next checkpoint write (``docs/concepts/protocol.md``). None if no owner is named,
    or the key is no valid connection id (no worker holds such a stream; cut to 200
    characters, a hostile key could name another stream and stop it)."""
    owner, conn_id = str_attr(image, ATTR.lease_owner), _valid_conn_id(image)
    # An owner as long as a lease may name (a 200-character worker id and its incarnation):
    # 200 left a valid holder of a long worker id without its stop.
    if not owner or len(owner) > MAX_OWNER_LEN or conn_id is None:
        return None
    epoch = int_attr(image, ATTR.epoch)
    return Decision(Outcome.ORDER, Reason.STOP, conn_id,
                    epoch if epoch is not None and 0 <= epoch < 10 ** 18 else None,
                    owner=owner, detail=f"malformed image, {why}"[:300], malformed=True)


def _malformed(image: Image | None, detail: str) -> Decision:
    return Decision(Outcome.MALFORMED, Reason.MALFORMED, _conn_id_or_none(image), detail=detail)
