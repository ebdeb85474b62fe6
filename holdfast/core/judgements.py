"""What a lease write's item says once the write was refused or its answer lost: whether it
is still ours (``loss_of``), how a release ended (``release_loss``), whether a renewal was
overtaken by a later one of ours (``overtaken``) or lost (``refused_renewal``). The writes
themselves, and their conditions, are ``holdfast.core.expressions``'; these judge the item
those conditions met, one rule for a lone call and a batch's statement alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from holdfast.core import rules
from holdfast.core.exceptions import LeaseLost, LossReason, MalformedItem
from holdfast.core.model import Lease, LeaseItem

__all__ = ["loss_of", "overtaken", "parse_or_none", "refused_renewal", "release_loss",
           "renewed"]


def overtaken(lease: Lease, raw: dict[str, Any] | None, expires: int | None,
               seq: int | None) -> Lease | None:
    """The lease as stored if a later write of our own (same owner and epoch) landed first.

    Two renewals of one lease can race (a heartbeat and a first checkpoint); the one computed
    earlier then fails ``#exp <= :exp`` (or the checkpoint condition, since the later one carried
    a later checkpoint). Only the holder writes while owner and epoch match, so the lease is ours
    and lasts at least as long as this renewal meant: it counts as renewed.
    """
    current = parse_or_none(raw)
    if current is None or rules.classify_loss(raw, lease.owner, lease.epoch) is not None:
        return None
    stored_exp = current.lease_expires_at_ms or 0
    # A checkpoint-only write (``expires`` None) has no racing twin of ours (the first
    # checkpoint is written before any periodic one can carry a seq), so a later stored seq is
    # someone else's; an expiry short of ours means no later renewal overtook this one: the
    # checkpoint was moved past ours by someone else.
    if expires is None or stored_exp < expires:
        return None
    return dataclasses.replace(lease, expires_at_ms=stored_exp, last_seq=current.last_seq,
                               unowned_ms=None)


def loss_of(lease: Lease, raw: Mapping[str, Any] | None) -> LossReason | None:
    """Why the item as stored (``raw``; None: gone) is not ``lease``'s any more; None if it
    still is."""
    if raw is None:
        return LossReason.DELETED
    try:
        LeaseItem.from_ddb(raw)
    except MalformedItem:
        return LossReason.INVALID
    return rules.classify_loss(raw, lease.owner, lease.epoch)


def release_loss(lease: Lease, raw: Mapping[str, Any] | None,
                 found: rules.ReleaseFound) -> LossReason | None:
    """A release's result from what its item showed (``rules.release_found``): None
    (released) or why not ours. The one answer of a lone release and a batch's statements."""
    if found is rules.ReleaseFound.LANDED:
        return None
    return loss_of(lease, raw) or LossReason.LOST


def refused_renewal(lease: Lease, raw: dict[str, Any] | None, expires: int | None,
                    seq: int | None) -> Lease:
    """A renewal refused on its condition, judged from the item as it was (ALL_OLD): the lease
    as stored if a later write of ours overtook it (``overtaken``), else ``LeaseLost`` saying
    why. The one judgement of a single renew and of a batch's statement."""
    raced = overtaken(lease, raw, expires, seq)
    if raced is None:
        raise LeaseLost(lease.conn_id, loss_of(lease, raw) or LossReason.REGRESSION,
                        parse_or_none(raw))
    return raced


def renewed(lease: Lease, expires: int | None, seq: int | None) -> Lease:
    # replace, not a field-by-field rebuild: weight and moved_at_ms must survive a renewal.
    return dataclasses.replace(
        lease, expires_at_ms=lease.expires_at_ms if expires is None else expires,
        last_seq=seq if seq is not None else lease.last_seq, unowned_ms=None)


def parse_or_none(raw: Mapping[str, Any] | None) -> LeaseItem | None:
    try:
        return LeaseItem.from_ddb(raw) if raw is not None else None
    except MalformedItem:
        return None
