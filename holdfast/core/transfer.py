"""The holder's transfer of a lease straight to its successor: ``transfer_lease``.

``holdfast.core.store`` keeps every lease call's entry point (``LeaseStore.transfer`` among
them); the transfer's outcome handling lives here. The store hands in its one conditional
UpdateItem and its consistent read, so the calls made (and their parameters) are the store's
own. The write itself is ``expressions.transfer_clauses``;
the make-before-break exchange around it is ``holdfast.core.handoff``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from holdfast.core import rules
from holdfast.core.aws import ConditionFailed
from holdfast.core.exceptions import LeaseLost, LossReason, StoreUnavailable
from holdfast.core.expressions import transfer_clauses
from holdfast.core.judgements import loss_of, parse_or_none
from holdfast.core.model import Lease

__all__ = ["transfer_lease", "transferred"]


def transferred(lease: Lease, handled_seq: int | None, to_owner: str, now: int,
                lease_ms: int) -> Lease:
    """The successor's lease once a transfer at ``now`` has landed."""
    seq = rules.next_checkpoint(lease.last_seq, handled_seq)
    return Lease(lease.conn_id, to_owner, rules.next_epoch(now, lease.epoch),
                 now + lease_ms, lease.ws_url, seq if seq is not None else lease.last_seq,
                 lease.error_count, weight=lease.weight, moved_at_ms=now,
                 single_connection=lease.single_connection)


def transfer_lease(lease: Lease, handled_seq: int | None, to_owner: str, *, now: int,
                   lease_ms: int, update: Callable[[str, str, dict[str, Any]], object],
                   read: Callable[[str], dict[str, Any] | None]) -> Lease:
    """Pass ``lease`` straight to ``to_owner`` (a make-before-break handoff,
    ``holdfast.core.handoff``): final checkpoint, owner, a new epoch, one conditional write.

    Only the holder writes it, after it stopped delivering; the condition is the release's
    (owner and epoch are ours, the checkpoint never backwards). ``update`` is the store's
    conditional write of the stream's item, ``read`` its consistent read. Returns the
    successor's lease; ``LeaseLost`` if the stream was not ours any more;
    ``StoreUnavailable`` if it is still ours and not passed on (the caller releases it
    instead).
    """
    seq = rules.next_checkpoint(lease.last_seq, handled_seq)
    passed = transferred(lease, handled_seq, to_owner, now, lease_ms)
    expression, condition, values = transfer_clauses(lease, passed, seq).update_expression()

    def landed(raw: dict[str, Any]) -> bool:
        return rules.held_by(raw, to_owner, passed.epoch)

    try:
        update(expression, condition, values)
    except ConditionFailed as failed:
        if failed.item and landed(failed.item):
            # botocore's retry of a write that landed but whose answer timed out (measured:
            # DynamoDB Local past the 3 s read timeout in a deploy): that is done.
            return passed
        raise LeaseLost(lease.conn_id, loss_of(lease, failed.item) or
                        LossReason.REGRESSION, parse_or_none(failed.item)) from None
    except StoreUnavailable:
        raw = read(lease.conn_id) or {}
        if landed(raw):
            return passed  # it landed; only the answer was lost
        if loss_of(lease, raw or None) is None:
            raise  # still ours: not passed on
        raise LeaseLost(lease.conn_id, loss_of(lease, raw or None) or LossReason.LOST,
                        parse_or_none(raw or None)) from None
    return passed
