"""The words of every lease write: attribute placeholders, the acquire and the quarantine as
expressions, and the renew/checkpoint and release writes as data, rendered for UpdateItem and
for PartiQL alike (``holdfast.core.store`` sends them one at a time, ``holdfast.core.batch``,
``holdfast.core.batch_endings`` and the reaper in batches, so the two forms can never drift
apart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from holdfast.core import rules, unowned
from holdfast.core.model import Lease
from holdfast.core.schema import ATTR, STARTED, STOPPED, LeaseStatus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import BatchStatementRequestTypeDef

__all__ = ["NAMES", "WriteClauses", "acquire_expression", "dead_release_clauses", "names_for",
           "num", "quarantine_expression", "release_clauses", "renew_clauses", "string",
           "transfer_clauses"]

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


# (attribute, DynamoDB-typed value) pairs: SETs or conditions.
_Clauses = tuple[tuple[str, dict[str, str]], ...]


@dataclass(frozen=True, slots=True)
class WriteClauses:
    """One conditional lease write as data, rendered for UpdateItem and for PartiQL alike.

    ``copies`` set an attribute from another of the item (target, source, default):
    UpdateItem writes the default where the source is missing (``if_not_exists``); PartiQL has
    no ``if_not_exists``, so there an item missing the source is refused as invalid, and the
    sender writes that one alone with UpdateItem.
    """

    sets: _Clauses
    equals: _Clauses
    at_most: _Clauses = ()  # attribute <= value
    at_most_or_missing: _Clauses = ()
    copies: tuple[tuple[str, str, dict[str, str]], ...] = ()
    removes: tuple[str, ...] = ()

    def update_expression(self) -> tuple[str, str, dict[str, Any]]:
        """(UpdateExpression, ConditionExpression, values) with ``NAMES`` placeholders."""
        alias = {v: k for k, v in NAMES.items()}
        values: dict[str, Any] = {}

        def val(attr: str, kind: str, value: dict[str, str]) -> str:
            name = f":{kind}_{alias[attr][1:]}"
            values[name] = value
            return name

        sets = [f"{alias[a]} = {val(a, 'set', v)}" for a, v in self.sets]
        sets += [f"{alias[a]} = if_not_exists({alias[b]}, {val(a, 'else', v)})"
                 for a, b, v in self.copies]
        update = "SET " + ", ".join(sets)
        if self.removes:
            update += " REMOVE " + ", ".join(alias[a] for a in self.removes)
        conds = [f"{alias[a]} = {val(a, 'eq', v)}" for a, v in self.equals]
        conds += [f"{alias[a]} <= {val(a, 'max', v)}" for a, v in self.at_most]
        conds += [f"(attribute_not_exists({alias[a]}) OR {alias[a]} <= {val(a, 'max', v)})"
                  for a, v in self.at_most_or_missing]
        return update, " AND ".join(conds), values

    def partiql(self, table: str, pk: str) -> BatchStatementRequestTypeDef:
        """One PartiQL UPDATE statement with the same effect and condition."""
        tests = [(f'"{a}" = ?', v) for a, v in self.equals]
        tests += [(f'"{a}" <= ?', v) for a, v in self.at_most]
        tests += [(f'("{a}" IS MISSING OR "{a}" <= ?)', v) for a, v in self.at_most_or_missing]
        where = [f'"{ATTR.pk}" = ?', *(t for t, _ in tests)]
        params = [*(v for _, v in self.sets), string(pk), *(v for _, v in tests)]
        clauses = [*(f'SET "{a}" = ?' for a, _ in self.sets),
                   *(f'SET "{a}" = "{b}"' for a, b, _ in self.copies),
                   *(f'REMOVE "{a}"' for a in self.removes)]
        return {"Statement": f'UPDATE "{table}" {" ".join(clauses)} WHERE {" AND ".join(where)}',
                "Parameters": params}


def _final_checkpoint(seq: int | None) -> _Clauses:
    """The checkpoint ``seq`` as a SET and, the same pair, as its never-backwards condition
    (``at_most_or_missing``); nothing for None."""
    return () if seq is None else ((ATTR.last_seq, num(seq)),)


def _held_by(lease: Lease, *, started: bool) -> _Clauses:
    """The fencing pair (owner and epoch are the holder's), and STARTED if ``started``: the
    conditions ``rules`` defines, as clauses."""
    conditions = rules.fencing_pair(lease.owner, lease.epoch)
    return tuple((a, string(v) if isinstance(v, str) else num(v))
                 for a, v in (*conditions, *((rules.STILL_STARTED,) if started else ())))


def renew_clauses(lease: Lease, now: int, expires: int | None, seq: int | None) -> WriteClauses:
    """The one definition of a renew (``expires`` set) or checkpoint-only write.

    Conditions: owner and epoch (the fencing pair), STARTED, the expiry never shortened (a late
    older renewal must not cut a lease short) and the checkpoint never backwards.
    """
    sets: list[tuple[str, dict[str, str]]] = []
    at_most: list[tuple[str, dict[str, str]]] = []
    if expires is not None:
        sets.append((ATTR.lease_expires_at_ms, num(expires)))
        at_most.append((ATTR.lease_expires_at_ms, num(expires)))
    sets.append((ATTR.updated_at_ms, num(now)))
    return WriteClauses(
        sets=(*sets, *_final_checkpoint(seq)), equals=_held_by(lease, started=True),
        at_most=tuple(at_most), at_most_or_missing=_final_checkpoint(seq))


def release_clauses(lease: Lease, now: int, seq: int | None, *, error: str | None = None,
                    retry_at_ms: int | None = None, moved: bool = False,
                    successor: str | None = None) -> WriteClauses:
    """The one definition of the holder's release (``LeaseStore.release`` says what each
    argument means; ``error`` is the text to record, scrubbed already).

    Conditions: owner and epoch, and the final checkpoint ``seq`` never backwards.
    """
    handoff = successor is not None and error is None and successor != lease.owner
    sets = [(ATTR.lease_expires_at_ms, num(
                retry_at_ms if error is not None and retry_at_ms else
                now + rules.HANDOFF_HOLD_MS if handoff else 0)),
            (ATTR.status, string(LeaseStatus.BACKOFF if error is not None
                                 else LeaseStatus.RELEASED)),
            (ATTR.updated_at_ms, num(now)),
            (ATTR.error_count, num(lease.error_count + 1 if error is not None else 0))]
    copies: tuple[tuple[str, str, dict[str, str]], ...] = ()
    if error is not None:
        sets.append((ATTR.last_error, string(error)))
    else:
        sets.append((ATTR.unowned_since_ms, num(now)))
        copies = unowned.MARK_COPIES
        if moved:
            sets.append((ATTR.moved_at_ms, num(now)))
        if handoff:
            sets.append((ATTR.successor, string(str(successor))))
    return WriteClauses(
        sets=(*sets, *_final_checkpoint(seq)), copies=copies,
        equals=_held_by(lease, started=False), at_most_or_missing=_final_checkpoint(seq),
        # A clean release ends the error streak (error_count 0) and its text with it: left,
        # an old "session ... dead" read as the reason for an operator's stop in `ls`.
        removes=(ATTR.lease_owner, *(() if handoff else (ATTR.successor,)),
                 *(() if error is not None else (ATTR.last_error,))))


def transfer_clauses(lease: Lease, passed: Lease, seq: int | None) -> WriteClauses:
    """The one definition of the holder's transfer to a warm successor (``LeaseStore.transfer``):
    the successor's lease ``passed`` (owner, epoch, expiry, RUNNING, moved at
    ``passed.moved_at_ms``, the write's time) with the final checkpoint ``seq``. Conditions:
    owner and epoch are the holder's, STARTED, the checkpoint never backwards."""
    now = passed.moved_at_ms or 0
    sets = [(ATTR.lease_owner, string(passed.owner)), (ATTR.epoch, num(passed.epoch)),
            (ATTR.lease_expires_at_ms, num(passed.expires_at_ms)),
            (ATTR.status, string(LeaseStatus.RUNNING)), (ATTR.updated_at_ms, num(now)),
            (ATTR.moved_at_ms, num(now)), *_final_checkpoint(seq)]
    return WriteClauses(
        sets=tuple(sets), equals=_held_by(lease, started=True),
        at_most_or_missing=_final_checkpoint(seq), removes=(ATTR.successor,))


def dead_release_clauses(owner: str, reason: str, now: int,
                         since_ms: int | None) -> WriteClauses:
    """The one definition of the sweeper's release of a dead or ended session's stream:
    conditional on the owner alone (any epoch of that session's), marked unowned since
    ``since_ms`` (None: now)."""
    return WriteClauses(
        sets=((ATTR.lease_expires_at_ms, num(0)), (ATTR.status, string(LeaseStatus.RELEASED)),
              (ATTR.updated_at_ms, num(now)), (ATTR.last_error, string(reason[:500])),
              (ATTR.unowned_since_ms, num(now if since_ms is None else since_ms))),
        copies=unowned.MARK_COPIES, equals=((ATTR.lease_owner, string(owner)),),
        removes=(ATTR.lease_owner,))


# Only an unowned, STARTED item whose back-off (if any) is over can be acquired; the epoch
# condition keeps the fencing token strictly increasing (``LeaseStore.acquire``).
# A handoff's hold (expiry in the future, ``successor`` = us) does not block the successor.
_ACQUIRE_CONDITION = ("#ds = :started AND attribute_not_exists(#owner) AND "
                      "(attribute_not_exists(#exp) OR #exp <= :cutoff OR #succ = :me) AND "
                      "(attribute_not_exists(#epoch) OR #epoch < :epoch)")
# Taking back a stream that our own session already owns (a lost answer, a failed release).
_ADOPT_CONDITION = "#ds = :started AND #owner = :me AND #epoch < :epoch"


def acquire_expression(owner: str, now: int, expires: int, epoch: int, *, cutoff: int | None,
                       first_checkpoint: int | None) -> tuple[str, str, dict[str, Any]]:
    """The one definition of the acquire's write (``LeaseStore.acquire``): UpdateItem's update,
    condition and values. ``cutoff`` None takes back a stream our session owns already
    (``_ADOPT_CONDITION``); ``first_checkpoint`` is written only where there is none (a
    holder's checkpoint is the truth)."""
    values = {":me": string(owner), ":exp": num(expires),
              ":running": string(LeaseStatus.RUNNING), ":now": num(now),
              ":epoch": num(epoch), ":started": string(STARTED)}
    if cutoff is not None:
        values[":cutoff"] = num(cutoff)
    anchor = ""
    if first_checkpoint is not None:
        values[":first"] = num(first_checkpoint)
        anchor = ", #seq = if_not_exists(#seq, :first)"
    update = (f"SET #owner = :me, #exp = :exp, #status = :running, #upd = :now, "
              f"#epoch = :epoch{anchor} REMOVE #succ")
    return update, _ADOPT_CONDITION if cutoff is None else _ACQUIRE_CONDITION, values


def quarantine_expression(owner: str, error: str, now: int,
                          until: int) -> tuple[str, str, dict[str, Any]]:
    """The one definition of the write that parks a malformed item until ``until`` with
    ``error`` recorded (``LeaseStore.quarantine``): STARTED, or a ``desired_state`` that is
    neither (a "stopped" typed on a held stream, which no claim could take or park)."""
    return ("SET #status = :invalid, #err = :err, #exp = :until, #upd = :now "
            "REMOVE #owner, #succ",  # no handoff's successor gets round the quarantine
            # Never over another owner's holding, whatever its expiry says: only its holder
            # or the reaper of a dead session ends that (docs/concepts/protocol.md).
            "attribute_exists(#ds) AND #ds <> :stopped AND "
            "(attribute_not_exists(#owner) OR #owner = :me)",
            {":invalid": string(LeaseStatus.INVALID), ":err": string(error),
             ":until": num(until), ":now": num(now), ":me": string(owner),
             ":stopped": string(STOPPED)})
