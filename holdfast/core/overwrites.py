"""A write outside the protocol over a held stream, and the holder's write that takes it back.

An app that writes its streams' items whole (``PutItem`` of ``Pk``, ``desired_state`` and
``ws_url``, as it inserted them) removes, on a stream someone holds, what only the protocol
writes: the owner, the epoch, the checkpoint. Read as a release it gave the stream a second
deliverer (claimed at once by another worker while the holder went on until its next
checkpoint) and cost its position (a claim with no ``last_seq`` starts at the upstream's
head). No writer of the protocol removes the epoch or lowers it, so such a write is told
apart from a release by its epoch alone (``rules.written_over``): the router sees it in the
record (``overwritten_holding``), nudges nobody and orders the holder to take the stream back
(``ORDER_RETAKE``); the holder writes its own holding and checkpoint back (``retake_clauses``,
``LeaseStore.retake``), keeping the app's attributes, unless someone claimed it meanwhile. The
router writes no ownership itself (its IAM role cannot); it holds the stream out of claims
until then, for a session TTL (``LeaseStore.normalise`` with a floor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from holdfast.core import rules
from holdfast.core.aws import ConditionFailed
from holdfast.core.exceptions import LeaseLost, LossReason
from holdfast.core.expressions import num, string
from holdfast.core.judgements import loss_of, parse_or_none, renewed
from holdfast.core.model import Lease, int_attr, str_attr
from holdfast.core.schema import ATTR, LeaseStatus

__all__ = ["Overwrite", "overwritten_holding", "retake_clauses", "retake_lease", "take_back_hold"]


@dataclass(frozen=True, slots=True)
class Overwrite:
    """A held stream's item written over: its holder and the holding's epoch as the record's
    old image had them."""

    conn_id: str
    owner: str
    epoch: int
    # The write left the same URL: its holder takes it back (then stops it if the write set
    # STOPPED, releasing with its checkpoint); else it stops it: a stream on another URL is
    # another stream, whose seqs ours must not be written over.
    retake: bool


def overwritten_holding(old_image: Mapping[str, Any] | None,
                        new_image: Mapping[str, Any] | None) -> Overwrite | None:
    """The holding a MODIFY removed outside the protocol: owned before, and after it no owner
    and the epoch gone or lowered (``rules.written_over``). None for anything else, or images
    that do not parse (the router's other rules judge those)."""
    new = parse_or_none(new_image)
    # The old image read attribute by attribute: a holding whose item broke the schema
    # meanwhile (a mistyped attribute an app set) was still someone's to take back.
    owner = str_attr(old_image or {}, ATTR.lease_owner)
    epoch = int_attr(old_image or {}, ATTR.epoch)
    if (new is None or new_image is None or owner is None or epoch is None
            or not rules.written_over(new_image, epoch)):
        return None
    return Overwrite(conn_id=new.conn_id, owner=owner, epoch=epoch,
                     retake=str_attr(old_image or {}, ATTR.ws_url) == new.ws_url)


def take_back_hold(image: Mapping[str, Any] | None, now_ms: int, skew_ms: int) -> int | None:
    """The end of the router's hold on ``image`` (an item written over, held out of claims
    for its holder's take-back: unowned, no ``status``, which every write of the protocol
    sets, and an expiry still to come), or None."""
    if not image or str_attr(image, ATTR.lease_owner) is not None or ATTR.status in image:
        return None
    expires = int_attr(image, ATTR.lease_expires_at_ms)
    return None if expires is None or rules.is_expired(expires, now_ms, skew_ms) else expires


def retake_clauses(lease: Lease, seq: int | None, now: int,
                   expires: int) -> tuple[str, str, dict[str, Any]]:
    """(UpdateExpression, ConditionExpression, values), with ``expressions.NAMES``
    placeholders, of the holder's write that takes back ``lease`` after a write over it:
    owner and epoch as they were, a new backstop ``expires``, RUNNING, the checkpoint ``seq``.
    Its condition: the item exists, no owner and an epoch below ours (``rules.written_over``):
    nobody claimed it since (a claim sets both) and it was not deleted. STARTED or STOPPED:
    a STOPPED one is taken back to be released with the holder's checkpoint."""
    update = "SET #owner = :me, #epoch = :epoch, #exp = :exp, #status = :running, #upd = :now"
    values: dict[str, Any] = {":me": string(lease.owner), ":epoch": num(lease.epoch),
                              ":exp": num(expires), ":running": string(LeaseStatus.RUNNING),
                              ":now": num(now)}
    if seq is not None:
        update += ", #seq = :seq"
        values[":seq"] = num(seq)
    return (update, "attribute_exists(#ds) AND attribute_not_exists(#owner) AND "
                    "(attribute_not_exists(#epoch) OR #epoch < :epoch)", values)


def retake_lease(lease: Lease, handled_seq: int | None, *, now: int, lease_ms: int,
                 update: Callable[[str, str, dict[str, Any]], dict[str, Any]]
                 ) -> tuple[Lease, bool] | None:
    """The take-back's outcome (``LeaseStore.retake``, whose one conditional UpdateItem,
    returning the item written, is ``update``): the lease and whether the stream is STOPPED,
    None if it was ours already, ``LeaseLost`` if not ours to take."""
    expires = now + lease_ms
    seq = max((s for s in (lease.last_seq, handled_seq) if s is not None), default=None)
    try:
        item = update(*retake_clauses(lease, seq, now, expires))
    except ConditionFailed as failed:
        if failed.item is not None and rules.held_by(failed.item, lease.owner, lease.epoch):
            return None
        raise LeaseLost(lease.conn_id, loss_of(lease, failed.item) or LossReason.LOST,
                        parse_or_none(failed.item)) from None
    return renewed(lease, expires, seq), not rules.meets(item, (rules.STILL_STARTED,))
