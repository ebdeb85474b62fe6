"""The one place that makes lease calls to DynamoDB: acquire, renew+checkpoint, release.

``LeaseStore`` is every lease call's entry point; the release (``LeaseStore.release``), the
transfer to a successor (``LeaseStore.transfer``) and the take-back (``LeaseStore.retake``)
have their outcome handling in ``holdfast.core.releasing``, ``holdfast.core.transfer`` and
``holdfast.core.overwrites``, and go through this store's conditional write and read like
every other call.

Every write is a single conditional UpdateItem. A failed condition returns the old item
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``) so the caller learns why without a read. A
timeout or 5xx is an unknown outcome: we re-read and decide by owner and epoch instead of
declaring the lease lost. botocore retries (standard mode) can replay a write that had already
landed, so a failed condition whose old item shows *us* as holder counts as success.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from holdfast.core import rules, unowned
from holdfast.core.anchor import Anchor, Unsettled
from holdfast.core.aws import ConditionFailed, InvalidRequest, call
from holdfast.core.exceptions import (
    AcquireFailed,
    LeaseLost,
    LossReason,
    MalformedItem,
    StoreUnavailable,
)
from holdfast.core.expressions import (
    acquire_expression,
    names_for,
    num,
    quarantine_expression,
    renew_clauses,
    string,
)
from holdfast.core.judgements import (
    loss_of,
    parse_or_none,
    refused_renewal,
    renewed,
)
from holdfast.core.model import Lease, LeaseItem, StoredItem, int_attr, lease_of
from holdfast.core.overwrites import retake_lease
from holdfast.core.releasing import release_lease
from holdfast.core.schema import ATTR, BACKSTOP_MS, pk_for
from holdfast.core.transfer import transfer_lease

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["QUARANTINE_MS", "LeaseStore", "wall_clock_ms"]


# How long a malformed STARTED item is parked before the sweep looks at it again.
QUARANTINE_MS = 300_000

def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(eq=False)
class LeaseStore:
    """Lease operations on one table. ``clock`` returns wall-clock milliseconds; ``lease_ms``
    is the expiry a holder's writes set: the backstop (``schema.BACKSTOP_MS``; a session
    keeps its streams alive, ``holdfast.core.sessions``), shorter only in tests."""

    client: DynamoDBClient
    table: str
    _: KW_ONLY
    skew_ms: int
    lease_ms: int = BACKSTOP_MS
    clock: Callable[[], int] = wall_clock_ms
    _anchors: Unsettled = field(default_factory=Unsettled, repr=False)  # holdfast.core.anchor

    # -- reads ---------------------------------------------------------------------------
    def get_raw(self, conn_id: str) -> dict[str, Any] | None:
        """The item as stored (strongly consistent), or None if there is none."""
        resp = call("GetItem", self.client.get_item, TableName=self.table,
                    Key={ATTR.pk: string(pk_for(conn_id))}, ConsistentRead=True)
        item = resp.get("Item")
        return dict(item) if item else None

    def get(self, conn_id: str) -> LeaseItem | None:
        """The parsed item, None if absent; ``MalformedItem`` if it breaks the schema."""
        got = self.read(conn_id)
        return got.item if got is not None else None

    def read(self, conn_id: str) -> StoredItem | None:
        """The item parsed and as stored (for the attributes ``LeaseItem`` does not carry),
        None if absent; ``MalformedItem`` if it breaks the schema."""
        raw = self.get_raw(conn_id)
        return StoredItem.of(raw) if raw is not None else None

    # -- writes --------------------------------------------------------------------------
    def _update(self, op: str, conn_id: str, update: str, condition: str,
                values: dict[str, Any], *, returns: str = "NONE") -> dict[str, Any]:
        resp = call(op, self.client.update_item, TableName=self.table,
                    Key={ATTR.pk: string(pk_for(conn_id))}, UpdateExpression=update,
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names_for(f"{update} {condition}"),
                    ExpressionAttributeValues=values, ReturnValues=returns,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD")
        return dict(resp.get("Attributes") or {})

    def acquire(self, conn_id: str, owner: str, *, anchor: Anchor | None = None) -> Lease:
        """Take a STARTED stream that nobody owns (and whose back-off, if any, is over).

        One conditional UpdateItem. Only an unowned item can be taken: an item that names an
        owner is freed by that owner's release or by the reaper of its dead session, never by
        an acquire (``docs/concepts/protocol.md``), so a forced write of the expiry cannot give a
        stream a second deliverer. The new epoch is ``rules.next_epoch``'s: it only goes up, also
        across a delete and re-create or a table restore (the clock is the floor). An item
        already owned by ``owner`` (an acquire whose answer was lost, a release that failed)
        is taken back under a new epoch.

        ``anchor``: a new stream's first checkpoint, written where there is none; removed at
        once if the item named another URL (``holdfast.core.anchor``).
        """
        now = self.clock()
        seen: list[int] = []  # the stored epochs a refused or unanswered write showed
        adopt = False
        watch = self._anchors.watch(conn_id, anchor)  # a wrong checkpoint it may leave
        for _ in range(4):
            epoch = rules.next_epoch(now, *seen)  # a clock behind a stored epoch: above it
            try:
                old = self._acquire_write(conn_id, owner, now, epoch, adopt, anchor=anchor)
            except ConditionFailed as failed:
                if failed.item is None:
                    raise AcquireFailed(conn_id, LossReason.DELETED, None) from None
                current = self._usable(conn_id, owner, failed.item)  # refused if it is malformed
                # Ours already: an earlier acquire of this session landed but its answer was
                # lost, or our release of it failed. Owners are unique per incarnation, so no
                # other process wrote it: taken back under a new epoch.
                ours = current.started and current.lease_owner == owner
                blocker = rules.claim_blocker(current, now, self.skew_ms, owner)
                if not ours and not (current.lease_owner is None and blocker is None):
                    raise AcquireFailed(conn_id, blocker or LossReason.HELD, current) from None
                adopt = adopt or ours
                if ours:  # this call's write, maybe, replayed by botocore after a lost answer
                    watch.may_have_landed()
                seen.append(current.epoch)
                continue
            except InvalidRequest as bad:
                parked = self.quarantine(conn_id, owner, f"cannot acquire: {bad.message}")
                raise AcquireFailed(conn_id, LossReason.INVALID, None, parked=parked) from None
            except StoreUnavailable:
                # No answer. If the item is ours now, take it back under a new epoch (whether
                # it was this write or an older holding of ours, a new epoch is right).
                watch.may_have_landed()
                try:
                    seen.append(self._acquire_unknown(conn_id, owner))
                except StoreUnavailable:
                    self._anchors.keep(watch)  # it may land yet: the next acquire looks again
                    raise
                adopt = True
                continue
            new = {**old, ATTR.lease_owner: string(owner), ATTR.epoch: num(epoch),
                   ATTR.lease_expires_at_ms: num(now + self.lease_ms)}
            self._anchors.settle(watch, old, new, owner=owner, epoch=epoch,
                                 update=functools.partial(self._update, "unanchor", conn_id))
            item = self._usable(conn_id, owner, new)  # ours now: parked if we cannot use it
            assert item.lease_expires_at_ms is not None
            unowned_ms = None if adopt else unowned.unowned_time_ms(old, now, self.skew_ms)
            return lease_of(item, new, owner, unowned_ms=unowned_ms)
        raise AcquireFailed(conn_id, LossReason.HELD, None)

    def _acquire_write(self, conn_id: str, owner: str, now: int, epoch: int,
                       adopt: bool, *, anchor: Anchor | None) -> dict[str, Any]:
        """The acquire's one write; returns the item as it was before it (ALL_OLD)."""
        update, condition, values = acquire_expression(
            owner, now, now + self.lease_ms, epoch,
            first_checkpoint=None if anchor is None else anchor.seq,
            cutoff=None if adopt else rules.acquire_cutoff_ms(now, self.skew_ms))
        return self._update("acquire", conn_id, update, condition, values, returns="ALL_OLD")

    def _usable(self, conn_id: str, owner: str, raw: dict[str, Any]) -> LeaseItem:
        """``raw`` parsed; one that breaks the schema (a mistyped epoch fails the acquire) is
        parked with the reason recorded, so it is not nudged and counted for ever, and refused."""
        try:
            return LeaseItem.from_ddb(raw)
        except MalformedItem as bad:
            parked = self.quarantine(conn_id, owner, bad.reason)
            raise AcquireFailed(conn_id, LossReason.INVALID, None, parked=parked) from bad

    def _acquire_unknown(self, conn_id: str, owner: str) -> int:
        """After an acquire without an answer: the stored epoch if the item is ours now,
        else ``StoreUnavailable`` (or ``AcquireFailed`` for an item we cannot use)."""
        raw = self.get_raw(conn_id)  # may raise StoreUnavailable: then we really don't know
        # A bad item may be why there was no answer (moto answers some such writes so): parked.
        item = self._usable(conn_id, owner, raw) if raw is not None else None
        if item is None or item.lease_owner != owner:
            raise StoreUnavailable("acquire", "no answer, and the stream is not ours on re-read")
        return item.epoch

    def renewal_terms(self, lease: Lease, handled_seq: int | None, *, extend: bool,
                      now: int) -> tuple[int | None, int | None]:
        """What a renewal at ``now`` writes: the new expiry (None: not extended) and the
        checkpoint (None: not moved). The one definition for a lone renewal and a batch's
        statements (``holdfast.core.batch``)."""
        return (now + self.lease_ms if extend else None,
                rules.next_checkpoint(lease.last_seq, handled_seq))

    def renew(self, lease: Lease, handled_seq: int | None = None, *,
              extend: bool = True) -> Lease:
        """Extend ``lease`` and checkpoint ``handled_seq`` in one write; ``LeaseLost`` if lost.

        With ``extend=False`` only the checkpoint is written (a session keeps the stream alive):
        no index key moves, and nothing is written at all if the checkpoint did not move.
        """
        now = self.clock()
        expires, seq = self.renewal_terms(lease, handled_seq, extend=extend, now=now)
        if expires is None and seq is None:
            return lease
        clauses = renew_clauses(lease, now, expires, seq)
        update, condition, values = clauses.update_expression()
        try:
            self._update("renew", lease.conn_id, update, condition, values)
        except ConditionFailed as failed:
            return refused_renewal(lease, failed.item, expires, seq)
        except StoreUnavailable:
            raw = self.get_raw(lease.conn_id)
            reason = loss_of(lease, raw)
            if reason is not None:
                raise LeaseLost(lease.conn_id, reason, parse_or_none(raw)) from None
            landed = raw is not None and (
                expires is None or int_attr(raw, ATTR.lease_expires_at_ms) == expires) and (
                seq is None or int_attr(raw, ATTR.last_seq) == seq)
            if not landed:
                raise  # still ours but not renewed: the caller retries before its fence
        return renewed(lease, expires, seq)

    def release(self, lease: Lease, handled_seq: int | None = None, *, error: str | None = None,
                retry_at_ms: int | None = None, moved: bool = False,
                successor: str | None = None) -> LossReason | None:
        """Final checkpoint and hand the lease back; None if released, else why it was not
        ours (``holdfast.core.releasing``: what ``error``, ``retry_at_ms``, ``moved`` and
        ``successor`` make of it)."""
        return release_lease(lease, handled_seq, error=error, retry_at_ms=retry_at_ms,
                             moved=moved, successor=successor, clock=self.clock,
                             read=self.get_raw,
                             update=functools.partial(self._update, "release", lease.conn_id))

    def transfer(self, lease: Lease, handled_seq: int | None, to_owner: str) -> Lease:
        """Pass ``lease`` straight to ``to_owner`` in one conditional write: the successor's
        lease, ``LeaseLost`` or ``StoreUnavailable`` (``holdfast.core.transfer``)."""
        return transfer_lease(lease, handled_seq, to_owner, now=self.clock(),
                              lease_ms=self.lease_ms, read=self.get_raw,
                              update=functools.partial(self._update, "transfer", lease.conn_id))

    def quarantine(self, conn_id: str, owner: str, reason: str) -> bool:
        """Park a malformed item out of the sweep's sight, with the reason recorded; False
        if not written (best effort: someone else holds or fixed it, it is STOPPED, or the
        next claim tries again)."""
        now = self.clock()
        try:
            self._update("quarantine", conn_id, *quarantine_expression(
                owner, f"malformed item: {reason}"[:1000], now, now + QUARANTINE_MS))
        except (ConditionFailed, InvalidRequest, StoreUnavailable):
            return False
        return True

    def normalise(self, conn_id: str, at_least_ms: int = 0) -> bool:
        """Give an item without ``lease_expires_at_ms`` the value 0, so the GSI sees it; with
        ``at_least_ms``, also raise a lower one to it (never lower it: a holder's backstop
        or a back-off stays), so no worker claims the stream before (the router's hold of a
        stream written over, for its holder's take-back: only while no write of the protocol
        came since, each of which sets a ``status``). Whether it wrote."""
        condition = "attribute_exists(#ds) AND (attribute_not_exists(#exp) OR #exp < :exp)"
        if at_least_ms:
            condition += " AND attribute_not_exists(#status)"
        try:
            self._update("normalise", conn_id, "SET #exp = :exp", condition,
                         {":exp": num(at_least_ms)})
        except ConditionFailed:
            return False
        return True

    def retake(self, lease: Lease, handled_seq: int | None = None) -> tuple[Lease, bool] | None:
        """Take back ``lease`` after a write outside the protocol removed it (the holder's,
        ``holdfast.core.overwrites``): owner and epoch as they were, a new backstop, and its
        checkpoint: ``handled_seq``, the holder's live one, if past the lease's (the last
        stored as the holder knows it, which misses a write whose answer was lost: the
        stored checkpoint went back). The lease and whether the write left the stream
        STOPPED (its holder then stops it); None if it is ours already (an earlier call's
        write: nothing written); ``LeaseLost`` if someone claimed it, or it is gone."""
        return retake_lease(lease, handled_seq, now=self.clock(), lease_ms=self.lease_ms,
                            update=functools.partial(self._update, "retake", lease.conn_id,
                                                     returns="ALL_NEW"))
