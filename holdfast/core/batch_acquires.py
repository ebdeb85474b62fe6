"""Acquire many leases in few round trips: a read, a PartiQL batch of the acquire, a read.

A burst of claims (300 streams inserted at once, a dead worker's 100 streams failing over)
was one conditional UpdateItem each, and those calls queued on the table: on DynamoDB Local,
the start-burst bench's acquires took 250 / 467 ms p50 / p99 per stream. Batched, ``BATCH_LIMIT``
statements share a call; a lone claim is still one UpdateItem (``LeaseStore.acquire``).

``BatchExecuteStatement`` returns no item for a statement applied, and the lease is built from
the item (its URL, checkpoint, weight...) and its unowned marker from the item as it was. So
a chunk is three calls:

1. one strongly consistent ``BatchGetItem`` of the items as they are;
2. the acquire of each item that read as plainly claimable (STARTED, unowned, back-off over,
   well-formed), in one batch: ``acquire_write.acquire_statement``, the single acquire's own
   condition and also the epoch it was read with, so the read is the item the write replaced
   as far as the unowned marker's check goes;
3. one read of the items written, refused on their condition or of unknown outcome: the lease
   is the item as it is now if it names us at the epoch we wrote (a statement refused because
   botocore replayed one that had landed included).

An item read as owned by another, STOPPED, backing off or gone is refused by the store's own
rule (``LeaseStore.refusal``) with no write, as the single acquire refuses it after its write:
refused claims are common in a burst (the sweeper nudges a stream whose claim is slow, and two
workers ask for it), and one UpdateItem each, in turn, stalled a whole batch for seconds.
What the reads cannot settle goes to ``LeaseStore.acquire`` (which takes back a stream our
session owns already, under a new epoch, and parks a malformed item): ours already, malformed,
a checkpoint to keep where a first one was asked for, a statement refused as invalid, an item
the last read did not return or finds claimable still. A request throttled (in the first read
or the batch) is ``StoreUnavailable``: its claim is retried later, as a throttled UpdateItem's
would be, without adding single calls on a table that is refusing them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from holdfast.core import rules, unowned
from holdfast.core.acquire_write import acquire_statement
from holdfast.core.aws import note_throttled
from holdfast.core.batch import BATCH_LIMIT, run_statements
from holdfast.core.batch_reads import read_raw_many
from holdfast.core.exceptions import (
    AcquireFailed,
    HoldfastError,
    LossReason,
    MalformedItem,
    StoreUnavailable,
)
from holdfast.core.model import Lease, LeaseItem, int_attr, lease_of
from holdfast.core.schema import ATTR, pk_for
from holdfast.core.store import LeaseStore

__all__ = ["AcquireAnswer", "AcquireRequest", "acquire_many"]


@dataclass(frozen=True, slots=True)
class AcquireRequest:
    """Acquire ``conn_id`` as ``owner`` (``LeaseStore.acquire``'s arguments)."""

    conn_id: str
    owner: str
    first_checkpoint: int | None = None


# The lease, or what ``LeaseStore.acquire`` would have raised (``AcquireFailed``,
# ``StoreUnavailable``...), for the caller to raise.
AcquireAnswer = Lease | HoldfastError


def _alone(store: LeaseStore, r: AcquireRequest) -> AcquireAnswer:
    try:
        return store.acquire(r.conn_id, r.owner, first_checkpoint=r.first_checkpoint)
    except HoldfastError as exc:
        return exc


def acquire_many(store: LeaseStore, requests: Sequence[AcquireRequest]) -> list[AcquireAnswer]:
    """Acquire every request, ``BATCH_LIMIT`` to a chunk (see the module); answers in request
    order. A single request, or one whose stream is asked for twice, is one UpdateItem."""
    if len(requests) == 1:
        return [_alone(store, requests[0])]
    answers: dict[int, AcquireAnswer] = {}
    first: dict[str, int] = {}
    for i, r in enumerate(requests):
        if r.conn_id in first:  # two writes to one item in one batch: the second goes alone
            answers[i] = _alone(store, r)
        else:
            first[r.conn_id] = i
    unique = sorted(first.values())
    for start in range(0, len(unique), BATCH_LIMIT):
        chunk = unique[start:start + BATCH_LIMIT]
        answers.update(zip(chunk, _chunk(store, [requests[i] for i in chunk]), strict=True))
    return [answers[i] for i in range(len(requests))]


def _judged(store: LeaseStore, r: AcquireRequest, raw: dict[str, Any] | None,
            now: int) -> AcquireAnswer | Literal["batch", "alone"]:
    """What the item as read says of ``r``: the answer (refused, by the store's own rule), or
    whether to acquire it in the batch or alone."""
    if raw is None:
        return AcquireFailed(r.conn_id, LossReason.DELETED, None)
    try:
        item = LeaseItem.from_ddb(raw)
    except MalformedItem:
        return "alone"  # the store parks it with the reason recorded
    refused = store.refusal(r.conn_id, r.owner, item, now)
    if refused is not None:
        return refused
    if item.lease_owner is not None or (r.first_checkpoint is not None
                                        and item.last_seq is not None):
        return "alone"  # ours already (taken back), or a checkpoint to keep (if_not_exists)
    return "batch"


def _chunk(store: LeaseStore, chunk: Sequence[AcquireRequest]) -> list[AcquireAnswer]:
    now = store.clock()
    seen = read_raw_many(store, (r.conn_id for r in chunk))
    out: dict[int, AcquireAnswer] = {}
    alone: list[int] = []
    batch: list[tuple[int, int, int | None]] = []  # (request, epoch written, epoch read)
    for i, r in enumerate(chunk):
        if r.conn_id not in seen:  # not read: throttled or unreachable
            out[i] = StoreUnavailable("acquire_many", "the item could not be read")
            continue
        raw = seen[r.conn_id]
        judged = _judged(store, r, raw, now)
        if judged == "batch":
            assert raw is not None
            seen_epoch = int_attr(raw, ATTR.epoch)
            batch.append((i, max(now, (seen_epoch or 0) + 1), seen_epoch))
        elif judged == "alone":
            alone.append(i)
        else:
            out[i] = judged
    outcomes = run_statements(store.client, "acquire_many", [acquire_statement(
        store.table, pk_for(chunk[i].conn_id), owner=chunk[i].owner, now=now,
        expires=now + store.lease_ms, epoch=epoch,
        cutoff=rules.acquire_cutoff_ms(now, store.skew_ms),
        first_checkpoint=chunk[i].first_checkpoint, seen_epoch=seen_epoch)
        for i, epoch, seen_epoch in batch]) if batch else []
    # Read back all but the throttled (not applied) and the invalid (refused as they are).
    unsure = [i for (i, _, _), (outcome, _) in zip(batch, outcomes, strict=True)
              if outcome in ("ok", "condition", "failed")]
    after = read_raw_many(store, (chunk[i].conn_id for i in unsure)) if unsure else {}
    for (i, epoch, seen_epoch), (outcome, message) in zip(batch, outcomes, strict=True):
        r = chunk[i]
        if outcome == "throttled":
            note_throttled()
            out[i] = StoreUnavailable("acquire_many", f"throttled: {message}"[:300])
        elif outcome == "invalid" or r.conn_id not in after:
            alone.append(i)  # the single acquire's own write and rules decide
        else:
            settled = _settled(store, r, after[r.conn_id], (epoch, seen_epoch), now)
            if settled is None:
                alone.append(i)
            else:
                out[i] = settled
    out.update((i, _alone(store, chunk[i])) for i in alone)
    return [out[i] for i in range(len(chunk))]


def _settled(store: LeaseStore, r: AcquireRequest, raw: dict[str, Any] | None,
             epochs: tuple[int, int | None], now: int) -> AcquireAnswer | None:
    """The answer the item read after the batch gives: our lease if it names us at the epoch
    we wrote (``epochs``: written, read before; also a statement refused or unknown whose
    earlier copy landed, replayed by botocore), else a refusal by the store's rule; None: the
    single acquire settles it (claimable still, or ours at another epoch)."""
    epoch, seen_epoch = epochs
    if raw is None or raw.get(ATTR.lease_owner) != {"S": r.owner} or int_attr(
            raw, ATTR.epoch) != epoch:
        judged = _judged(store, r, raw, now)
        return None if judged in ("batch", "alone") else cast(AcquireAnswer, judged)
    try:
        item = store.usable(r.conn_id, r.owner, raw)  # ours: parked if we cannot use it
    except HoldfastError as exc:
        return exc
    # The marker is as the write found it (an acquire does not write it), at the epoch the
    # write replaced (its condition): measured as the single acquire measures it.
    before = {k: v for k, v in raw.items() if k != ATTR.epoch}
    if seen_epoch is not None:
        before[ATTR.epoch] = {"N": str(seen_epoch)}
    return lease_of(item, raw, r.owner,
                    unowned_ms=unowned.unowned_time_ms(before, now, store.skew_ms))
