"""The words of every lease write: attribute placeholders, and the renew/checkpoint write as
data, rendered for UpdateItem and for PartiQL alike (``holdfast.core.store`` and
``holdfast.core.batch`` both send it, so the two can never drift apart).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from holdfast.core import rules, unowned
from holdfast.core.exceptions import MalformedItem
from holdfast.core.model import Lease, LeaseItem
from holdfast.core.schema import ATTR, STARTED

__all__ = ["NAMES", "RenewClauses", "names_for", "num", "overtaken", "parse_or_none",
           "renew_clauses", "renewed", "string"]

# Expression attribute names used by every lease write (``status`` is a reserved word).
NAMES = {
    "#ds": ATTR.desired_state,
    "#owner": ATTR.lease_owner,
    "#exp": ATTR.lease_expires_at_ms,
    "#seq": ATTR.last_seq,
    "#epoch": ATTR.epoch,
    "#status": ATTR.status,
    "#upd": ATTR.updated_at_ms,
    "#err": ATTR.last_error,
    "#errs": ATTR.error_count,
    "#moved": ATTR.moved_at_ms,
    "#succ": ATTR.successor,
    "#single": ATTR.single_connection,
    **unowned.MARK_NAMES,
}


def num(n: int) -> dict[str, str]:
    return {"N": str(n)}


def string(s: str) -> dict[str, str]:
    return {"S": s}


def names_for(expression: str) -> dict[str, str]:
    # DynamoDB rejects unused placeholders, so send only the names an expression uses.
    used = set(re.findall(r"#\w+", expression))
    return {k: v for k, v in NAMES.items() if k in used}


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
        """(UpdateExpression, ConditionExpression, values) with ``NAMES`` placeholders."""
        alias = {v: k for k, v in NAMES.items()}
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
        tests = [(f"{a} = ?", v) for a, v in self.equals]
        tests += [(f"{a} <= ?", v) for a, v in self.at_most]
        tests += [(f"({a} IS MISSING OR {a} <= ?)", v) for a, v in self.at_most_or_missing]
        where = [f"{ATTR.pk} = ?", *(t for t, _ in tests)]
        params = [*(v for _, v in self.sets), string(pk), *(v for _, v in tests)]
        sets = " ".join(f"SET {a} = ?" for a, _ in self.sets)
        return {"Statement": f'UPDATE "{table}" {sets} WHERE {" AND ".join(where)}',
                "Parameters": params}


def renew_clauses(lease: Lease, now: int, expires: int | None, seq: int | None) -> RenewClauses:
    """The one definition of a renew (``expires`` set) or checkpoint-only write."""
    sets: list[tuple[str, dict[str, str]]] = []
    at_most: list[tuple[str, dict[str, str]]] = []
    if expires is not None:
        sets.append((ATTR.lease_expires_at_ms, num(expires)))
        at_most.append((ATTR.lease_expires_at_ms, num(expires)))
    sets.append((ATTR.updated_at_ms, num(now)))
    seq_clause: tuple[tuple[str, dict[str, str]], ...] = ()
    if seq is not None:
        sets.append((ATTR.last_seq, num(seq)))
        seq_clause = ((ATTR.last_seq, num(seq)),)
    return RenewClauses(
        sets=tuple(sets),
        equals=((ATTR.lease_owner, string(lease.owner)), (ATTR.epoch, num(lease.epoch)),
                (ATTR.desired_state, string(STARTED))),
        at_most=tuple(at_most), at_most_or_missing=seq_clause)


def overtaken(lease: Lease, raw: dict[str, Any] | None, expires: int | None,
               seq: int | None) -> Lease | None:
    """The lease as stored if a later write of our own (same owner and epoch) landed first.

    Two renewals of one lease can race (a heartbeat and a first checkpoint); the one computed
    earlier then fails ``#exp <= :exp`` (or the checkpoint condition, since the later one carried
    a later checkpoint). Only the holder writes while owner and epoch match, so the lease is ours
    and lasts at least as long as this renewal meant: it counts as renewed.
    """
    current = parse_or_none(raw)
    if current is None or rules.classify_loss(current, lease.owner, lease.epoch) is not None:
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
