"""The one place that makes lease calls to DynamoDB: acquire, renew+checkpoint, release.

Every write is a single conditional UpdateItem. A failed condition returns the old item
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``) so the caller learns why without a read. A
timeout or 5xx is an unknown outcome: we re-read and decide by owner and epoch instead of
declaring the lease lost. botocore retries (standard mode) can replay a write that had already
landed, so a failed condition whose old item shows *us* as holder counts as success.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from holdfast.core import rules, unowned
from holdfast.core.aws import ConditionFailed, InvalidRequest, call
from holdfast.core.exceptions import (
    AcquireFailed,
    LeaseLost,
    LossReason,
    MalformedItem,
    StoreUnavailable,
)
from holdfast.core.model import Lease, LeaseItem, int_attr, weight_of
from holdfast.core.redact import scrub
from holdfast.core.schema import ATTR, STARTED, LeaseStatus, pk_for

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["QUARANTINE_MS", "LeaseStore", "RenewClauses", "renew_clauses", "wall_clock_ms"]

# How long a malformed STARTED item is parked before the sweep looks at it again.
QUARANTINE_MS = 300_000

# Expression attribute names used by every lease write (``status`` is a reserved word).
_NAMES = {
    "#ds": ATTR.desired_state,
    "#owner": ATTR.lease_owner,
    "#exp": ATTR.lease_expires_at_ms,
    "#seq": ATTR.last_seq,
    "#epoch": ATTR.epoch,
    "#status": ATTR.status,
    "#upd": ATTR.updated_at_ms,
    "#err": ATTR.last_error,
    "#errs": ATTR.error_count,
    "#token": ATTR.token,
    "#poison": ATTR.poison_seq,
    "#moved": ATTR.moved_at_ms,
    **unowned.MARK_NAMES,
}


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _num(n: int) -> dict[str, str]:
    return {"N": str(n)}


def _str(s: str) -> dict[str, str]:
    return {"S": s}


def _names(expression: str) -> dict[str, str]:
    # DynamoDB rejects unused placeholders, so send only the names an expression uses.
    used = set(re.findall(r"#\w+", expression))
    return {k: v for k, v in _NAMES.items() if k in used}


class LeaseStore:
    """Lease operations on one table. ``clock`` returns wall-clock milliseconds."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        *,
        lease_ms: int,
        skew_ms: int,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.client = client
        self.table = table
        self.lease_ms = lease_ms
        self.skew_ms = skew_ms
        self.clock = clock

    # -- reads ---------------------------------------------------------------------------
    def get_raw(self, conn_id: str) -> dict[str, Any] | None:
        """The item as stored (strongly consistent), or None if there is none."""
        resp = call("GetItem", self.client.get_item, TableName=self.table,
                    Key={ATTR.pk: _str(pk_for(conn_id))}, ConsistentRead=True)
        item = resp.get("Item")
        return dict(item) if item else None

    def get(self, conn_id: str) -> LeaseItem | None:
        """The parsed item, None if absent; ``MalformedItem`` if it breaks the schema."""
        raw = self.get_raw(conn_id)
        return LeaseItem.from_ddb(raw) if raw is not None else None

    # -- writes --------------------------------------------------------------------------
    def _update(self, op: str, conn_id: str, update: str, condition: str,
                values: dict[str, Any], *, return_new: bool = False) -> dict[str, Any]:
        resp = call(op, self.client.update_item, TableName=self.table,
                    Key={ATTR.pk: _str(pk_for(conn_id))}, UpdateExpression=update,
                    ConditionExpression=condition,
                    ExpressionAttributeNames=_names(update + condition),
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW" if return_new else "NONE",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD")
        return dict(resp.get("Attributes") or {})

    def acquire(self, conn_id: str, owner: str) -> Lease:
        """Take a STARTED lease that is unowned or expired; bump the epoch; return it as written."""
        now = self.clock()
        expires = now + self.lease_ms
        token = secrets.token_hex(8)
        try:
            new = self._update(
                "acquire", conn_id,
                "SET #owner = :me, #exp = :exp, #status = :running, #upd = :now, #token = :token "
                "ADD #epoch :one",
                "#ds = :started AND (attribute_not_exists(#exp) OR #exp <= :cutoff)",
                {":me": _str(owner), ":exp": _num(expires), ":running": _str(LeaseStatus.RUNNING),
                 ":token": _str(token),
                 ":now": _num(now), ":one": _num(1), ":started": _str(STARTED),
                 ":cutoff": _num(rules.acquire_cutoff_ms(now, self.skew_ms))},
                return_new=True)
        except ConditionFailed as failed:
            return self._acquire_failed(conn_id, owner, failed.item, now, token)
        except InvalidRequest as bad:
            self.quarantine(conn_id, owner, f"cannot acquire: {bad.message}")
            raise AcquireFailed(conn_id, LossReason.INVALID, None) from None
        except StoreUnavailable:
            return self._acquire_unknown(conn_id, owner, token, now)
        return self._as_lease(conn_id, owner, new, now)

    def _as_lease(self, conn_id: str, owner: str, raw: dict[str, Any], now: int) -> Lease:
        try:
            item = LeaseItem.from_ddb(raw)
        except MalformedItem as bad:
            # We hold a lease on an item we cannot use: park it with the reason recorded.
            self.quarantine(conn_id, owner, bad.reason)
            raise AcquireFailed(conn_id, LossReason.INVALID, None) from bad
        assert item.lease_expires_at_ms is not None
        return Lease(conn_id, owner, item.epoch, item.lease_expires_at_ms, item.ws_url,
                     item.last_seq, item.error_count,
                     unowned_ms=unowned.unowned_time_ms(raw, now, self.skew_ms),
                     weight=weight_of(raw), moved_at_ms=int_attr(raw, ATTR.moved_at_ms))

    def _acquire_failed(self, conn_id: str, owner: str, raw: dict[str, Any] | None,
                        now: int, token: str) -> Lease:
        if raw is None:
            raise AcquireFailed(conn_id, LossReason.DELETED, None)
        try:
            current = LeaseItem.from_ddb(raw)
        except MalformedItem:
            raise AcquireFailed(conn_id, LossReason.INVALID, None) from None
        if _is_our_write(raw, owner, token):
            # A botocore retry replayed our own successful write. The per-call token tells it
            # apart from an older lease of ours, which must not be handed back as a new one.
            return self._as_lease(conn_id, owner, raw, now)
        reason = rules.claim_blocker(current, now, self.skew_ms) or LossReason.HELD
        raise AcquireFailed(conn_id, reason, current)

    def _acquire_unknown(self, conn_id: str, owner: str, token: str, now: int) -> Lease:
        raw = self.get_raw(conn_id)  # may raise StoreUnavailable: then we really don't know
        if raw is not None and _is_our_write(raw, owner, token):
            return self._as_lease(conn_id, owner, raw, now)
        raise StoreUnavailable("acquire", "no answer, and the lease is not ours on re-read")

    def renew(self, lease: Lease, handled_seq: int | None = None, *,
              extend: bool = True) -> Lease:
        """Extend ``lease`` and checkpoint ``handled_seq`` in one write; ``LeaseLost`` if lost.

        With ``extend=False`` only the checkpoint is written (a session keeps the stream alive):
        no index key moves, and nothing is written at all if the checkpoint did not move.
        """
        now = self.clock()
        expires = now + self.lease_ms if extend else None
        seq = rules.next_checkpoint(lease.last_seq, handled_seq)
        if expires is None and seq is None:
            return lease
        clauses = renew_clauses(lease, now, expires, seq)
        update, condition, values = clauses.update_expression()
        try:
            self._update("renew", lease.conn_id, update, condition, values)
        except ConditionFailed as failed:
            raced = _overtaken(lease, failed.item, expires, seq)
            if raced is None:
                raise self._lost(lease, failed.item) from None
            return raced
        except StoreUnavailable:
            raw = self.get_raw(lease.conn_id)
            reason = self._loss_of(lease, raw)
            if reason is not None:
                raise LeaseLost(lease.conn_id, reason, _parse_or_none(raw)) from None
            landed = raw is not None and (
                expires is None or int_attr(raw, ATTR.lease_expires_at_ms) == expires) and (
                seq is None or int_attr(raw, ATTR.last_seq) == seq)
            if not landed:
                raise  # still ours but not renewed: the caller retries before its fence
        return _renewed(lease, expires, seq)

    def _loss_of(self, lease: Lease, raw: dict[str, Any] | None) -> LossReason | None:
        if raw is None:
            return LossReason.DELETED
        try:
            return rules.classify_loss(LeaseItem.from_ddb(raw), lease.owner, lease.epoch)
        except MalformedItem:
            return LossReason.INVALID

    def _lost(self, lease: Lease, raw: dict[str, Any] | None) -> LeaseLost:
        reason = self._loss_of(lease, raw) or LossReason.REGRESSION
        return LeaseLost(lease.conn_id, reason, _parse_or_none(raw))

    def release(self, lease: Lease, handled_seq: int | None = None, *, error: str | None = None,
                retry_at_ms: int | None = None, moved: bool = False) -> LossReason | None:
        """Final checkpoint and hand the lease back; None if released, else why it was not ours.

        With ``error`` the release is a give-up after upstream failures: the error is recorded
        and the lease stays unclaimable until ``retry_at_ms`` (the sweep finds it then).
        Otherwise it leaves the unowned-since marker (``holdfast.core.unowned``); ``moved``
        (a rebalancing move) also stamps ``moved_at_ms``, which starts the stream's cool-down.
        """
        now = self.clock()
        seq = rules.next_checkpoint(lease.last_seq, handled_seq)
        update = "SET #exp = :exp, #status = :status, #upd = :now, #errs = :errs"
        values: dict[str, Any] = {
            ":exp": _num(retry_at_ms if error is not None and retry_at_ms else 0),
            ":status": _str(LeaseStatus.BACKOFF if error is not None
                            else LeaseStatus.RELEASED),
            ":now": _num(now),
            ":errs": _num(lease.error_count + 1 if error is not None else 0),
            ":me": _str(lease.owner), ":epoch": _num(lease.epoch)}
        condition = "#owner = :me AND #epoch = :epoch"
        if error is not None:
            update += ", #err = :err"
            # Whatever wrote the error text, the URL's secrets never reach the item.
            values[":err"] = _str(scrub(error, lease.ws_url)[:1000])
        else:
            update += ", " + unowned.MARK_SET
            values.update(unowned.MARK_VALUES)
            values[":unowned_since"] = _num(now)
            if moved:
                update += ", #moved = :now"
        if seq is not None:
            update += ", #seq = :seq"
            condition += " AND (attribute_not_exists(#seq) OR #seq <= :seq)"
            values[":seq"] = _num(seq)
        update += " REMOVE #owner"
        try:
            self._update("release", lease.conn_id, update, condition, values)
        except ConditionFailed as failed:
            # Our own replayed release leaves owner unset and the epoch unchanged: that is done.
            return self._loss_of(lease, failed.item) if failed.item and _owner_of(
                failed.item) else None
        except StoreUnavailable:
            raw = self.get_raw(lease.conn_id)
            if raw is not None and _owner_of(raw) == lease.owner and int_attr(
                    raw, ATTR.epoch) == lease.epoch:
                raise
            return None if raw is None or _owner_of(raw) is None else LossReason.LOST
        return None

    def record_poison(self, lease: Lease, seq: int, error: str) -> bool:
        """Note on the item that ``seq`` was skipped unhandled (a poison frame); False if not
        written. One small update on owner and epoch, no key or index attribute touched."""
        with contextlib.suppress(ConditionFailed, StoreUnavailable):  # lost, or best effort
            self._update("record_poison", lease.conn_id,
                         "SET #poison = :seq, #err = :err, #upd = :now",
                         "#owner = :me AND #epoch = :epoch",
                         {":seq": _num(seq), ":err": _str(scrub(error, lease.ws_url)[:1000]),
                          ":now": _num(self.clock()), ":me": _str(lease.owner),
                          ":epoch": _num(lease.epoch)})
            return True
        return False

    def quarantine(self, conn_id: str, owner: str, reason: str) -> None:
        """Park a malformed STARTED item out of the sweep's sight, with the reason recorded."""
        now = self.clock()
        # Best effort: someone else holds or fixed it, or the next sweep tries again.
        with contextlib.suppress(ConditionFailed, InvalidRequest, StoreUnavailable):
            self._update(
                "quarantine", conn_id,
                "SET #status = :invalid, #err = :err, #exp = :until, #upd = :now REMOVE #owner",
                "#ds = :started AND (attribute_not_exists(#owner) OR #owner = :me "
                "OR attribute_not_exists(#exp) OR #exp <= :cutoff)",
                {":invalid": _str(LeaseStatus.INVALID),
                 ":err": _str(f"malformed item: {reason}"[:1000]),
                 ":until": _num(now + QUARANTINE_MS), ":now": _num(now), ":me": _str(owner),
                 ":started": _str(STARTED),
                 ":cutoff": _num(rules.acquire_cutoff_ms(now, self.skew_ms))})

    def normalise(self, conn_id: str) -> bool:
        """Give an item without ``lease_expires_at_ms`` the value 0, so the GSI sees it."""
        try:
            self._update("normalise", conn_id, "SET #exp = :zero",
                         "attribute_exists(#ds) AND attribute_not_exists(#exp)",
                         {":zero": _num(0)})
        except ConditionFailed:
            return False
        return True


@dataclass(frozen=True, slots=True)
class RenewClauses:
    """The renew/checkpoint write as data, rendered for UpdateItem and for PartiQL alike.

    Conditions: owner and epoch (the fencing pair), STARTED, the expiry never shortened (a late
    older renewal must not cut a lease short) and the checkpoint never backwards.
    """

    sets: tuple[tuple[str, dict[str, str]], ...]
    equals: tuple[tuple[str, dict[str, str]], ...]
    at_most: tuple[tuple[str, dict[str, str]], ...]  # attribute <= value
    at_most_or_missing: tuple[tuple[str, dict[str, str]], ...]

    def update_expression(self) -> tuple[str, str, dict[str, Any]]:
        """(UpdateExpression, ConditionExpression, values) with ``_NAMES`` placeholders."""
        alias = {v: k for k, v in _NAMES.items()}
        values: dict[str, Any] = {}

        def val(attr: str, kind: str, value: dict[str, str]) -> str:
            name = f":{kind}_{alias[attr][1:]}"
            values[name] = value
            return name

        update = "SET " + ", ".join(f"{alias[a]} = {val(a, 'set', v)}" for a, v in self.sets)
        conds = [f"{alias[a]} = {val(a, 'eq', v)}" for a, v in self.equals]
        conds += [f"{alias[a]} <= {val(a, 'max', v)}" for a, v in self.at_most]
        conds += [f"(attribute_not_exists({alias[a]}) OR {alias[a]} <= {val(a, 'max', v)})"
                  for a, v in self.at_most_or_missing]
        return update, " AND ".join(conds), values

    def partiql(self, table: str, pk: str) -> dict[str, Any]:
        """One PartiQL UPDATE statement with the same effect and condition."""
        params: list[dict[str, str]] = [v for _, v in self.sets]
        where = [f"{ATTR.pk} = ?"]
        params.append(_str(pk))
        for a, v in self.equals:
            where.append(f"{a} = ?")
            params.append(v)
        for a, v in self.at_most:
            where.append(f"{a} <= ?")
            params.append(v)
        for a, v in self.at_most_or_missing:
            where.append(f"({a} IS MISSING OR {a} <= ?)")
            params.append(v)
        sets = " ".join(f"SET {a} = ?" for a, _ in self.sets)
        return {"Statement": f'UPDATE "{table}" {sets} WHERE {" AND ".join(where)}',
                "Parameters": params}


def renew_clauses(lease: Lease, now: int, expires: int | None, seq: int | None) -> RenewClauses:
    """The one definition of a renew (``expires`` set) or checkpoint-only write."""
    sets: list[tuple[str, dict[str, str]]] = []
    at_most: list[tuple[str, dict[str, str]]] = []
    if expires is not None:
        sets.append((ATTR.lease_expires_at_ms, _num(expires)))
        at_most.append((ATTR.lease_expires_at_ms, _num(expires)))
    sets.append((ATTR.updated_at_ms, _num(now)))
    seq_clause: tuple[tuple[str, dict[str, str]], ...] = ()
    if seq is not None:
        sets.append((ATTR.last_seq, _num(seq)))
        seq_clause = ((ATTR.last_seq, _num(seq)),)
    return RenewClauses(
        sets=tuple(sets),
        equals=((ATTR.lease_owner, _str(lease.owner)), (ATTR.epoch, _num(lease.epoch)),
                (ATTR.desired_state, _str(STARTED))),
        at_most=tuple(at_most), at_most_or_missing=seq_clause)


def _overtaken(lease: Lease, raw: dict[str, Any] | None, expires: int | None,
               seq: int | None) -> Lease | None:
    """The lease as stored if a later write of our own (same owner and epoch) landed first.

    Two renewals of one lease can race (a heartbeat and a first checkpoint); the one computed
    earlier then fails ``#exp <= :exp`` (or the checkpoint condition, since the later one carried
    a later checkpoint). Only the holder writes while owner and epoch match, so the lease is ours
    and lasts at least as long as this renewal meant: it counts as renewed.
    """
    current = _parse_or_none(raw)
    if current is None or rules.classify_loss(current, lease.owner, lease.epoch) is not None:
        return None
    stored_exp = current.lease_expires_at_ms or 0
    if expires is not None and stored_exp < expires:
        # Not overtaken by a later renewal: the checkpoint was moved past ours by someone else.
        return None
    if expires is None:
        # A checkpoint-only write has no racing twin of ours (the first checkpoint is written
        # before any periodic one can carry a seq), so a later stored seq is someone else's.
        return None
    return Lease(lease.conn_id, lease.owner, lease.epoch, stored_exp, lease.ws_url,
                 current.last_seq, lease.error_count)


def _renewed(lease: Lease, expires: int | None, seq: int | None) -> Lease:
    return Lease(lease.conn_id, lease.owner, lease.epoch,
                 lease.expires_at_ms if expires is None else expires, lease.ws_url,
                 seq if seq is not None else lease.last_seq, lease.error_count)


def _is_our_write(raw: dict[str, Any], owner: str, token: str) -> bool:
    value = raw.get(ATTR.token)
    return _owner_of(raw) == owner and isinstance(value, dict) and value.get("S") == token


def _owner_of(raw: dict[str, Any]) -> str | None:
    value = raw.get(ATTR.lease_owner)
    s = value.get("S") if isinstance(value, dict) else None
    return s if isinstance(s, str) else None


def _parse_or_none(raw: dict[str, Any] | None) -> LeaseItem | None:
    try:
        return LeaseItem.from_ddb(raw) if raw is not None else None
    except MalformedItem:
        return None
