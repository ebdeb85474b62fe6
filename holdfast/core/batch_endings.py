"""Release many leases in few round trips: PartiQL ``BatchExecuteStatement`` of the release.

A worker told to stop releases every stream it could not hand over warm, within its stop
budget. One UpdateItem each, from the worker's 16 IO threads, is 1,000 calls, 2.1 s and 1.4 s of
client CPU (which the stopping worker's loop needs) for 1,000 streams on DynamoDB Local; 25 to
a call, 4 calls at a time, 40 calls, 1.1 s and 0.14-0.16 s (``python -m bench.release_cost``,
``bench/results/2026-12-05-release-batch.md``).

Each statement is ``LeaseStore.release``'s write (``expressions.release_clauses``, rendered
for PartiQL) and fails on its own. A statement applied is released. Those whose condition
failed or whose outcome is unknown are read back in one ``BatchGetItem`` and settled by the
store's rules (``rules.release_found``: landed, our replayed release or the named successor
holding it already; still ours: an unknown outcome tried again by the caller, a refused one
released alone, where the store releases it without the checkpoint that refused it;
otherwise lost). One that DynamoDB refused as
invalid (an item missing what the unowned marker copies, one near 400 KB), or one the read did
not return, is released again alone by ``LeaseStore.release``, which writes the marker's
defaults: one set of rules. A throttled one comes back as ``StoreUnavailable`` for the caller
to retry later; sending each alone at once would add calls to a table already refusing them.

Only the plain release is batched; a give-up after upstream errors (``error``) is rare and goes
alone. Transfers (a warm handoff's last write) stay one UpdateItem each: gathered into batches
they showed no gain in the deploy bench (``bench/results/2026-12-05-release-batch.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from holdfast.core import rules
from holdfast.core.aws import note_throttled
from holdfast.core.batch import BATCH_LIMIT, run_statements
from holdfast.core.batch_reads import read_raw_many
from holdfast.core.exceptions import HoldfastError, LossReason, StoreUnavailable
from holdfast.core.expressions import release_clauses
from holdfast.core.judgements import release_loss
from holdfast.core.model import Lease
from holdfast.core.schema import pk_for
from holdfast.core.store import LeaseStore

__all__ = ["ReleaseRequest", "ReleaseResult", "release_many"]


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


def release_many(store: LeaseStore, requests: Sequence[ReleaseRequest]) -> list[ReleaseResult]:
    """Release every request, ``BATCH_LIMIT`` to a call; results in request order. A single
    request is one UpdateItem (``worker.gathered`` sends one at a time for backends whose
    PartiQL ignores conditions, ``HOLDFAST_RENEW_MODE=single``)."""
    if len(requests) == 1:
        return [_alone(store, r) for r in requests]
    out: list[ReleaseResult] = []
    for start in range(0, len(requests), BATCH_LIMIT):
        chunk = requests[start:start + BATCH_LIMIT]
        now = store.clock()
        outcomes = run_statements(store.client, "release_many", [
            release_clauses(r.lease, now, rules.next_checkpoint(r.lease.last_seq, r.handled_seq),
                            moved=r.moved, successor=r.successor,
                            ).partiql(store.table, pk_for(r.lease.conn_id)) for r in chunk])
        unsettled = [(i, r, outcome) for i, (r, (outcome, _)) in enumerate(
            zip(chunk, outcomes, strict=True)) if outcome in ("condition", "failed")]
        read = _read_back(store, [r for _, r, _ in unsettled])
        settled = {i: _settle(store, r, outcome, read) for i, r, outcome in unsettled}
        for i, (r, (outcome, message)) in enumerate(zip(chunk, outcomes, strict=True)):
            if outcome == "ok":
                out.append(ReleaseResult(r.lease.conn_id))
            elif outcome == "throttled":
                note_throttled()
                out.append(ReleaseResult(r.lease.conn_id, error=StoreUnavailable(
                    "release_many", f"throttled: {message}"[:300])))
            elif i in settled:
                out.append(settled[i])
            else:  # refused as invalid: alone, the store's rules decide
                out.append(_alone(store, r))
    return out


def _read_back(store: LeaseStore, requests: Sequence[ReleaseRequest]
               ) -> dict[str, dict[str, Any] | None]:
    """The items of statements whose condition failed or whose outcome is unknown, in one
    read: after a batch call timed out on a loaded table, botocore's retry replays it, and
    every statement of a batch that landed fails its condition. Alone, one UpdateItem each,
    those took 5 s for 25 on the deploy's DynamoDB Local and answered "lost" for the streams
    the named successors had taken meanwhile. One not read goes alone."""
    return read_raw_many(store, (r.lease.conn_id for r in requests))


def _settle(store: LeaseStore, r: ReleaseRequest, outcome: str,
            read: dict[str, dict[str, Any] | None]) -> ReleaseResult:
    """One unsettled statement's result from its item as read back (``LeaseStore.release``'s
    rules: ``rules.release_found``)."""
    conn_id = r.lease.conn_id
    if conn_id not in read:
        return _alone(store, r)  # not read: the store's one UpdateItem decides
    raw = read[conn_id]
    found = rules.release_found(raw, r.lease.owner, r.lease.epoch, r.successor)
    if found is rules.ReleaseFound.LANDED:
        return ReleaseResult(conn_id)
    if found is rules.ReleaseFound.STILL_OURS:
        if outcome == "failed":  # not written: the caller tries again
            return ReleaseResult(conn_id, error=StoreUnavailable(
                "release_many", "outcome unknown and the lease is still ours"))
        return _alone(store, r)  # its condition failed while ours: the store's rules decide
    return ReleaseResult(conn_id, release_loss(r.lease, raw, found))
