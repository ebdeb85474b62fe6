"""Renew many leases in few round trips: PartiQL ``BatchExecuteStatement`` of conditional UPDATEs.

Each statement carries the same condition as a single renew (owner, epoch, STARTED, checkpoint
never backwards) and fails on its own, so one lost lease does not fail the other 24. A statement
that fails on its condition comes back with the item as it was (ALL_OLD, per statement) and is
judged by the same rule as a single renew (``judgements.refused_renewal``), with no call of its
own: under throttling a lost lease is known in the batch's call, not a checkpoint later. One
refused without the item (gone, or a backend that does not return it) is settled by a single
``LeaseStore.renew``.

Throttling is the exception: re-trying each throttled statement alone (and re-reading it) turns
one throttled batch into 25 more calls against a table that is already refusing them. Throttled
statements are instead sent again *together*, in one batch call after a short jittered back-off
(the client's adaptive rate limiter spaces the calls of the whole process); what is still
throttled after ``THROTTLE_ROUNDS`` comes back as ``StoreUnavailable``, to be written with the
next checkpoint. A whole call refused as throttled is not split up either.

Bad input stays local: a statement DynamoDB refuses as invalid (``ValidationError``: an item
near the 400 KB limit, an attribute of the wrong type) is that request's ``RenewRefused``
result, and the other statements of its batch are renewed. If a whole batch call is refused as
invalid, each lease is renewed on its own, so only the bad one fails. The caller logs and
counts it for that stream; the lease is kept until its fence, as for any other failed renewal.

``mode="single"`` renews one UpdateItem at a time, for backends whose PartiQL ignores conditions
(moto) and as the measured baseline.

``run_statements`` is the bare call with each statement's outcome on its own, for writers with
simpler rules than a renewal (the sweeper's release of a dead session's streams).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from holdfast.core import rules
from holdfast.core.aws import THROTTLING_CODES, InvalidRequest, call, note_throttled
from holdfast.core.exceptions import HoldfastError, LeaseError, StoreUnavailable
from holdfast.core.expressions import renew_clauses
from holdfast.core.judgements import refused_renewal, renewed
from holdfast.core.model import Lease
from holdfast.core.schema import pk_for
from holdfast.core.store import LeaseStore

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import BatchStatementRequestTypeDef

__all__ = ["BATCH_LIMIT", "THROTTLE_ROUNDS", "Outcome", "RenewMode", "RenewRefused",
           "RenewRequest", "RenewResult", "renew_many", "run_statements", "throttle_pause_s"]

BATCH_LIMIT = 25  # DynamoDB's maximum statements per BatchExecuteStatement
THROTTLE_ROUNDS = 1  # one more batch call for throttled statements, then the next checkpoint
# (more rounds spend calls while the table is throttled; the checkpoint interval is the back-off)
RenewMode = Literal["batch", "single"]
# BatchExecuteStatement's per-statement code for a statement refused as invalid.
_INVALID_CODES = frozenset({"ValidationError", "ValidationException"})
_CONDITION_CODES = frozenset({"ConditionalCheckFailed", "ConditionalCheckFailedException"})
# One statement's fate: applied, its WHERE was false, refused as invalid, throttled (not
# applied), or failed otherwise (outcome unknown); with DynamoDB's message.
Outcome = Literal["ok", "condition", "invalid", "throttled", "failed"]


class RenewRefused(LeaseError):
    """DynamoDB refused one lease's renewal as invalid: that item, not the batch, is bad."""

    def __init__(self, conn_id: str, message: str) -> None:
        super().__init__(f"renew of {conn_id!r} refused as invalid: {message}"[:500])
        self.conn_id = conn_id


def throttle_pause_s(round_: int, rand: Callable[[], float] = random.random) -> float:
    """Pause before re-sending round ``round_`` (>= 1) of throttled statements: 50 ms doubling,
    full jitter, so the chunks of one heartbeat that were throttled together do not retry
    together."""
    return 0.05 * 2.0 ** (round_ - 1) * rand()


@dataclass(frozen=True, slots=True)
class RenewRequest:
    """Renew ``lease`` (``extend``) and/or checkpoint ``handled_seq``."""

    lease: Lease
    handled_seq: int | None = None
    extend: bool = True


@dataclass(frozen=True, slots=True)
class RenewResult:
    """``lease`` is the renewed lease, or None with ``error`` saying why (lost or unknown)."""

    conn_id: str
    lease: Lease | None
    error: LeaseError | None = None


def renew_many(store: LeaseStore, requests: Sequence[RenewRequest], mode: RenewMode = "batch",
               *, pool: Executor | None = None) -> list[RenewResult]:
    """Renew and checkpoint every request; results come back in request order.

    With ``pool`` the calls run concurrently: 5,000 leases are 200 batch calls, about 3 s
    back to back at 15 ms each, which would eat most of a 5 s heartbeat.
    """
    # A checkpoint-only request whose checkpoint did not move has nothing to write.
    idle = {i for i, r in enumerate(requests) if not r.extend and rules.next_checkpoint(
        r.lease.last_seq, r.handled_seq) is None}
    if idle:
        busy = [r for i, r in enumerate(requests) if i not in idle]
        done = iter(renew_many(store, busy, mode, pool=pool))
        return [RenewResult(r.lease.conn_id, r.lease) if i in idle else next(done)
                for i, r in enumerate(requests)]
    step = BATCH_LIMIT if mode == "batch" else 1
    chunks = [requests[i:i + step] for i in range(0, len(requests), step)]

    def run(chunk: Sequence[RenewRequest]) -> list[RenewResult]:
        if len(chunk) > 1:
            return _renew_chunk(store, chunk)
        return [_renew_one(store, r) for r in chunk]

    if pool is None or len(chunks) <= 1:
        return [result for chunk in chunks for result in run(chunk)]
    return [result for done in pool.map(run, chunks) for result in done]


def _renew_one(store: LeaseStore, request: RenewRequest) -> RenewResult:
    try:
        return RenewResult(request.lease.conn_id, store.renew(
            request.lease, request.handled_seq, extend=request.extend))
    except LeaseError as exc:
        return RenewResult(request.lease.conn_id, None, exc)
    except InvalidRequest as bad:  # this item's write, not the batch, is at fault
        return RenewResult(request.lease.conn_id, None,
                           RenewRefused(request.lease.conn_id, bad.message))


def _renew_chunk(store: LeaseStore, chunk: Sequence[RenewRequest],
                 sleep: Callable[[float], None] = time.sleep) -> list[RenewResult]:
    now = store.clock()
    built = []
    for r in chunk:
        expires, seq = store.renewal_terms(r.lease, r.handled_seq, extend=r.extend, now=now)
        clauses = renew_clauses(r.lease, now, expires, seq)
        statement = clauses.partiql(store.table, pk_for(r.lease.conn_id))
        # A refused statement then says why itself (a lost lease is known in this call even
        # while single calls are throttled); a failed write costs the same with it.
        statement["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        built.append((statement, seq, expires))
    out: dict[int, RenewResult] = {}
    pending = list(range(len(chunk)))
    for round_ in range(THROTTLE_ROUNDS + 1):
        if round_:
            sleep(throttle_pause_s(round_))
        try:
            resp = call("renew_many", store.client.batch_execute_statement,
                        Statements=[built[i][0] for i in pending])
        except (StoreUnavailable, InvalidRequest) as exc:
            if isinstance(exc, StoreUnavailable) and exc.detail in THROTTLING_CODES:
                break  # refused whole: nothing applied, and splitting it up only adds calls
            # Unknown outcome (timeout, 5xx): settle each lease on its own, which resolves it.
            # Refused whole as invalid for what one statement holds: alone, only that one fails.
            out.update((i, _renew_one(store, chunk[i])) for i in pending)
            pending = []
            break
        throttled = []
        for i, answer in zip(pending, resp.get("Responses", []), strict=True):
            request, (_, seq, expires) = chunk[i], built[i]
            error = answer.get("Error")
            if error is None:
                out[i] = RenewResult(request.lease.conn_id, renewed(request.lease, expires, seq))
            elif error.get("Code") in THROTTLING_CODES:
                note_throttled()
                throttled.append(i)  # not applied: the same statement may simply be sent again
            elif error.get("Code") in _INVALID_CODES:  # sent alone it would fail the same way
                out[i] = RenewResult(request.lease.conn_id, None, RenewRefused(
                    request.lease.conn_id, str(error.get("Message") or error.get("Code"))))
            elif error.get("Code") in _CONDITION_CODES and "Item" in error:
                out[i] = _refused(request, error["Item"], expires, seq)
            else:  # no item: gone, or a backend that does not return it; settled alone
                out[i] = _renew_one(store, request)
        pending = throttled
        if not pending:
            break
    for i in pending:
        out[i] = RenewResult(chunk[i].lease.conn_id, None,
                             StoreUnavailable("renew_many", "throttled"))
    return [out[i] for i in range(len(chunk))]


def _refused(request: RenewRequest, item: dict[str, Any], expires: int | None,
             seq: int | None) -> RenewResult:
    try:
        return RenewResult(request.lease.conn_id,
                           refused_renewal(request.lease, item, expires, seq))
    except LeaseError as exc:
        return RenewResult(request.lease.conn_id, None, exc)


def run_statements(client: DynamoDBClient, operation: str,
                   statements: Sequence[BatchStatementRequestTypeDef],
                   ) -> list[tuple[Outcome, str]]:
    """One ``BatchExecuteStatement`` of up to ``BATCH_LIMIT`` statements: each statement's
    outcome and message, in order. A whole call refused gives every statement that outcome
    (throttled, invalid, or failed: a timeout or 5xx, which may have applied any of them)."""
    try:
        resp = call(operation, client.batch_execute_statement, Statements=list(statements))
    except InvalidRequest as bad:
        return [("invalid", bad.message)] * len(statements)
    except StoreUnavailable as exc:
        kind: Outcome = "throttled" if exc.detail in THROTTLING_CODES else "failed"
        return [(kind, str(exc))] * len(statements)
    except HoldfastError as exc:  # refused credentials, a missing table: every item fails
        return [("failed", str(exc))] * len(statements)
    answers = resp.get("Responses", [])
    if len(answers) != len(statements):  # not DynamoDB's contract: trust none of them
        return [("failed", f"{len(answers)} answers to {len(statements)} statements")] * len(
            statements)
    return [_outcome(answer.get("Error")) for answer in answers]


def _outcome(error: Mapping[str, Any] | None) -> tuple[Outcome, str]:
    if error is None:
        return "ok", ""
    code = str(error.get("Code", ""))
    message = f"{code}: {error.get('Message') or ''}".rstrip(": ")
    if code in _CONDITION_CODES:
        return "condition", message
    if code in _INVALID_CODES:
        return "invalid", message
    return ("throttled" if code in THROTTLING_CODES else "failed"), message
