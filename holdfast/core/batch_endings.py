"""A holding's last write for many leases in few round trips: PartiQL
``BatchExecuteStatement`` of the release (``release_many``) and of the transfer to a warm
successor (``transfer_many``).

A worker told to stop releases every stream it could not hand over warm, within its stop
budget. One UpdateItem each, from the worker's 16 IO threads, is 1,000 calls, 2.1 s and 1.4 s of
client CPU (which the stopping worker's loop needs) for 1,000 streams on DynamoDB Local; 25 to
a call, 4 calls at a time, 40 calls, 1.1 s and 0.14 s (``python -m bench.release_cost``,
``bench/results/2026-12-05-release-batch.md``).

Each statement is ``LeaseStore.release``'s write (``expressions.release_clauses``, rendered
for PartiQL) and fails on its own. A statement applied is released. One whose condition
failed, that DynamoDB refused as invalid (an item missing what the unowned marker copies, one
near 400 KB) or whose outcome is unknown is released again alone by ``LeaseStore.release``,
which tells our own replayed release from a lost lease and writes the marker's defaults: one
set of rules. A throttled one comes back as ``StoreUnavailable`` for the caller to retry
later; sending each alone at once would add calls to a table already refusing them.

Only the plain release is batched; a give-up after upstream errors (``error``) is rare and goes
alone.

Transfers follow the same rules. Many warm handoffs end together when several workers stop at
once (a deploy's new-first style), and each stream waits in its gap for its transfer. A
statement not settled by the batch goes alone with the batch's time, so the same new epoch: its
own write, landed after all, is then told apart from a loss (``LeaseStore.transfer``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from holdfast.core import rules
from holdfast.core.aws import note_throttled
from holdfast.core.batch import BATCH_LIMIT, RenewMode, run_statements
from holdfast.core.exceptions import HoldfastError, LossReason, StoreUnavailable
from holdfast.core.expressions import release_clauses, transfer_clauses
from holdfast.core.model import Lease
from holdfast.core.schema import pk_for
from holdfast.core.store import LeaseStore

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import BatchStatementRequestTypeDef

__all__ = ["ReleaseRequest", "ReleaseResult", "TransferRequest", "TransferResult",
           "release_many", "transfer_many"]


@dataclass(frozen=True, slots=True)
class ReleaseRequest:
    """Release ``lease`` with its final checkpoint ``handled_seq`` (``LeaseStore.release``)."""

    lease: Lease
    handled_seq: int | None = None
    moved: bool = False
    successor: str | None = None


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """``LeaseStore.release``'s answer for one request (``lost``: why it was not ours), or
    ``error``: not released (throttled, unreachable), to be tried again."""

    conn_id: str
    lost: LossReason | None = None
    error: HoldfastError | None = None


def _alone(store: LeaseStore, r: ReleaseRequest) -> ReleaseResult:
    try:
        return ReleaseResult(r.lease.conn_id, store.release(
            r.lease, r.handled_seq, moved=r.moved, successor=r.successor))
    except HoldfastError as exc:
        return ReleaseResult(r.lease.conn_id, error=exc)


@dataclass(frozen=True, slots=True)
class TransferRequest:
    """Pass ``lease`` to ``to_owner`` with its final checkpoint ``handled_seq``
    (``LeaseStore.transfer``)."""

    lease: Lease
    handled_seq: int | None
    to_owner: str


@dataclass(frozen=True, slots=True)
class TransferResult:
    """``LeaseStore.transfer``'s answer for one request: the successor's lease, or ``error``
    as it would have raised it (``LeaseLost``: not ours; else still ours, not passed on)."""

    conn_id: str
    passed: Lease | None = None
    error: HoldfastError | None = None


R = TypeVar("R")
T = TypeVar("T")


def _in_batches(store: LeaseStore, operation: str, requests: Sequence[R], *,
                statement: Callable[[R, int], BatchStatementRequestTypeDef],
                applied: Callable[[R, int], T], alone: Callable[[R, int], T],
                throttled: Callable[[R, StoreUnavailable], T]) -> list[T]:
    """Each chunk of ``BATCH_LIMIT`` requests as one call at one time ``now``: a statement
    applied is ``applied(r, now)``; one throttled, ``throttled``; any other settled by
    ``alone(r, now)`` (see the module)."""
    out: list[T] = []
    for start in range(0, len(requests), BATCH_LIMIT):
        chunk = requests[start:start + BATCH_LIMIT]
        now = store.clock()
        outcomes = run_statements(store.client, operation, [statement(r, now) for r in chunk])
        for r, (outcome, message) in zip(chunk, outcomes, strict=True):
            if outcome == "ok":
                out.append(applied(r, now))
            elif outcome == "throttled":
                note_throttled()
                out.append(throttled(r, StoreUnavailable(operation,
                                                         f"throttled: {message}"[:300])))
            else:  # condition, invalid, unknown: alone, the store's rules decide
                out.append(alone(r, now))
    return out


def transfer_many(store: LeaseStore, requests: Sequence[TransferRequest],
                  mode: RenewMode = "batch") -> list[TransferResult]:
    """Transfer every request, ``BATCH_LIMIT`` to a call; results in request order."""

    def alone(r: TransferRequest, now: int | None) -> TransferResult:
        try:
            return TransferResult(r.lease.conn_id, store.transfer(
                r.lease, r.handled_seq, r.to_owner, now=now))
        except HoldfastError as exc:
            return TransferResult(r.lease.conn_id, error=exc)

    if mode == "single" or len(requests) == 1:
        return [alone(r, None) for r in requests]
    return _in_batches(
        store, "transfer_many", requests,
        statement=lambda r, now: transfer_clauses(
            r.lease, store.transferred(r.lease, r.handled_seq, r.to_owner, now),
            rules.next_checkpoint(r.lease.last_seq, r.handled_seq),
        ).partiql(store.table, pk_for(r.lease.conn_id)),
        applied=lambda r, now: TransferResult(r.lease.conn_id, store.transferred(
            r.lease, r.handled_seq, r.to_owner, now)),
        alone=alone, throttled=lambda r, error: TransferResult(r.lease.conn_id, error=error))


def release_many(store: LeaseStore, requests: Sequence[ReleaseRequest],
                 mode: RenewMode = "batch") -> list[ReleaseResult]:
    """Release every request, ``BATCH_LIMIT`` to a call; results in request order.

    ``mode="single"`` writes one UpdateItem each (backends whose PartiQL ignores conditions).
    """
    if mode == "single" or len(requests) == 1:
        return [_alone(store, r) for r in requests]
    return _in_batches(
        store, "release_many", requests,
        statement=lambda r, now: release_clauses(
            r.lease, now, rules.next_checkpoint(r.lease.last_seq, r.handled_seq),
            moved=r.moved, successor=r.successor).partiql(store.table, pk_for(r.lease.conn_id)),
        applied=lambda r, _: ReleaseResult(r.lease.conn_id),
        alone=lambda r, _: _alone(store, r),
        throttled=lambda r, error: ReleaseResult(r.lease.conn_id, error=error))
