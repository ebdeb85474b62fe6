"""The acquire's write, defined once and rendered two ways: an UpdateItem for
``LeaseStore.acquire`` and a PartiQL UPDATE for ``holdfast.core.batch_acquires``.

The condition is data (``_Test``): each test knows its UpdateItem text (``expressions.NAMES``
placeholders, named values) and its PartiQL text (quoted attributes, ``?`` parameters), so the
two forms of the one rule cannot drift apart; ``tests/core/test_batch_acquires.py`` runs both
against DynamoDB Local on the same items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from holdfast.core.expressions import NAMES, num, string
from holdfast.core.schema import ATTR, STARTED, LeaseStatus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import BatchStatementRequestTypeDef

__all__ = ["acquire_expression", "acquire_statement"]

_ALIAS: Final = {attr: name for name, attr in NAMES.items()}


@dataclass(frozen=True, slots=True)
class _Test:
    """One condition in both languages; ``params`` are the named values the PartiQL form's
    ``?`` stand for, in order."""

    update: str
    partiql: str
    params: tuple[str, ...] = ()


def _cmp(attr: str, op: str, value: str) -> _Test:
    return _Test(f"{_ALIAS[attr]} {op} {value}", f'"{attr}" {op} ?', (value,))


def _missing(attr: str) -> _Test:
    return _Test(f"attribute_not_exists({_ALIAS[attr]})", f'"{attr}" IS MISSING')


def _any(*tests: _Test) -> _Test:
    return _Test("(" + " OR ".join(t.update for t in tests) + ")",
                 "(" + " OR ".join(t.partiql for t in tests) + ")",
                 tuple(p for t in tests for p in t.params))


def _all(*tests: _Test) -> _Test:
    return _Test(" AND ".join(t.update for t in tests), " AND ".join(t.partiql for t in tests),
                 tuple(p for t in tests for p in t.params))


# Only an unowned, STARTED item whose back-off (if any) is over can be acquired; the epoch
# condition keeps the fencing token strictly increasing (``LeaseStore.acquire``).
# A handoff's hold (expiry in the future, ``successor`` = us) does not block the successor.
_ACQUIRE: Final = _all(
    _cmp(ATTR.desired_state, "=", ":started"), _missing(ATTR.lease_owner),
    _any(_missing(ATTR.lease_expires_at_ms), _cmp(ATTR.lease_expires_at_ms, "<=", ":cutoff"),
         _cmp(ATTR.successor, "=", ":me")),
    _any(_missing(ATTR.epoch), _cmp(ATTR.epoch, "<", ":epoch")))
# Taking back a stream that our own session already owns (a lost answer, a failed release).
_ADOPT: Final = _all(_cmp(ATTR.desired_state, "=", ":started"),
                     _cmp(ATTR.lease_owner, "=", ":me"), _cmp(ATTR.epoch, "<", ":epoch"))
# What the acquire sets (and it removes a handoff's ``successor``).
_SETS: Final = ((ATTR.lease_owner, ":me"), (ATTR.lease_expires_at_ms, ":exp"),
                (ATTR.status, ":running"), (ATTR.updated_at_ms, ":now"), (ATTR.epoch, ":epoch"))


def _values(owner: str, now: int, expires: int, epoch: int,
            cutoff: int | None) -> dict[str, Any]:
    values = {":me": string(owner), ":exp": num(expires),
              ":running": string(LeaseStatus.RUNNING), ":now": num(now),
              ":epoch": num(epoch), ":started": string(STARTED)}
    if cutoff is not None:
        values[":cutoff"] = num(cutoff)
    return values


def acquire_expression(owner: str, now: int, expires: int, epoch: int, *, cutoff: int | None,
                       first_checkpoint: int | None) -> tuple[str, str, dict[str, Any]]:
    """The acquire's write for UpdateItem (``LeaseStore.acquire``): update, condition and
    values. ``cutoff`` None takes back a stream our session owns already (``_ADOPT``);
    ``first_checkpoint`` is written only where there is none (a holder's checkpoint is the
    truth)."""
    values = _values(owner, now, expires, epoch, cutoff)
    anchor = ""
    if first_checkpoint is not None:
        values[":first"] = num(first_checkpoint)
        anchor = f", {_ALIAS[ATTR.last_seq]} = if_not_exists({_ALIAS[ATTR.last_seq]}, :first)"
    sets = ", ".join(f"{_ALIAS[attr]} = {value}" for attr, value in _SETS)
    update = f"SET {sets}{anchor} REMOVE {_ALIAS[ATTR.successor]}"
    return update, (_ADOPT if cutoff is None else _ACQUIRE).update, values


def acquire_statement(table: str, pk: str, *, owner: str, now: int, expires: int, epoch: int,
                      cutoff: int, first_checkpoint: int | None,
                      seen_epoch: int | None) -> BatchStatementRequestTypeDef:
    """The same acquire as one PartiQL UPDATE, for an item read just before
    (``batch_acquires``): also conditioned on the epoch it was read with (``seen_epoch``,
    None: it had none), so the read is the item the write replaced in all that the unowned
    marker's check needs. PartiQL has no ``if_not_exists``: with ``first_checkpoint`` the
    item must have no checkpoint (an item that has one is acquired alone, by UpdateItem)."""
    values = _values(owner, now, expires, epoch, cutoff)
    seen = _missing(ATTR.epoch) if seen_epoch is None else _cmp(ATTR.epoch, "=", ":seen")
    if seen_epoch is not None:
        values[":seen"] = num(seen_epoch)
    tests = [_ACQUIRE, seen]
    sets = [(attr, values[value]) for attr, value in _SETS]
    if first_checkpoint is not None:
        tests.append(_missing(ATTR.last_seq))
        sets.append((ATTR.last_seq, num(first_checkpoint)))
    where = _all(*tests)
    clauses = " ".join([*(f'SET "{attr}" = ?' for attr, _ in sets),
                        f'REMOVE "{ATTR.successor}"'])
    return {"Statement": f'UPDATE "{table}" {clauses} WHERE "{ATTR.pk}" = ? AND {where.partiql}',
            "Parameters": [*(v for _, v in sets), string(pk),
                           *(values[p] for p in where.params)]}
