"""Typed, validated views of lease items read from DynamoDB (tables and stream images alike).

Items come from a table that other systems write, so every attribute is checked: a missing or
mistyped attribute, an unknown state or an absurd number becomes a ``MalformedItem`` naming the
item and the attribute, never a ``KeyError`` in a caller.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from holdfast.core.exceptions import MalformedItem
from holdfast.core.schema import ATTR, STARTED, STOPPED, conn_id_from_pk

__all__ = [
    "MAX_EPOCH",
    "MAX_SEQ",
    "MAX_TIMESTAMP_MS",
    "MAX_VERSION_LEN",
    "MAX_WEIGHT",
    "MAX_WORKER_ID_LEN",
    "VERSION_PATTERN",
    "Lease",
    "LeaseItem",
    "StoredItem",
    "bool_attr",
    "connects_before_claim",
    "int_attr",
    "lease_of",
    "one_connection_only",
    "str_attr",
    "validate_conn_id",
    "validate_worker_id",
    "weight_of",
]

# Far beyond anything real (year ~2286) but small enough to stay exact in a float/JS number.
MAX_TIMESTAMP_MS = 10**13
MAX_SEQ = 2**63 - 1
MAX_EPOCH = 2**53
MAX_URL_LEN = 4096
MAX_OWNER_LEN = 256
# A worker id never contains "#": lease_owner is "<worker id>#<incarnation>" (schema.owner_for).
MAX_WORKER_ID_LEN = 200
_CONN_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,200}$")
_WORKER_ID = re.compile(rf"^[A-Za-z0-9._:@/+=-]{{1,{MAX_WORKER_ID_LEN}}}$")
# A worker version (HOLDFAST_WORKER_VERSION): an ECS "family:revision", an image tag, a hash.
MAX_VERSION_LEN = 128
VERSION_PATTERN = re.compile(rf"[A-Za-z0-9._:@/+=-]{{1,{MAX_VERSION_LEN}}}")

AttributeMap = Mapping[str, Any]


def validate_conn_id(conn_id: str) -> str:
    """Return ``conn_id`` if it is a usable connection id, else raise ``ValueError``."""
    if not isinstance(conn_id, str) or not _CONN_ID.fullmatch(conn_id):
        raise ValueError(
            f"invalid connection id {str(conn_id)[:80]!r}: 1-200 characters of "
            "letters, digits and ._:@/+=-"
        )
    return conn_id


def validate_worker_id(worker_id: str) -> str:
    """Return ``worker_id`` if it is a usable worker id, else raise ``ValueError``."""
    if not isinstance(worker_id, str) or not _WORKER_ID.fullmatch(worker_id):
        raise ValueError(
            f"invalid worker id {str(worker_id)[:80]!r}: 1-{MAX_WORKER_ID_LEN} characters of "
            "letters, digits and ._:@/+=-")
    return worker_id


@dataclass(frozen=True, slots=True)
class LeaseItem:
    """One row of the lease table, as read. ``lease_expires_at_ms`` is None when never set."""

    conn_id: str
    desired_state: str
    ws_url: str
    lease_owner: str | None
    lease_expires_at_ms: int | None
    last_seq: int | None
    epoch: int
    status: str | None = None
    last_error: str | None = None
    error_count: int = 0
    # The owner a handoff named (held for it until the expiry); a malformed one counts as none.
    successor: str | None = None

    @property
    def started(self) -> bool:
        return self.desired_state == STARTED

    @classmethod
    def from_ddb(cls, item: AttributeMap) -> LeaseItem:
        """Parse a low-level (``{"S": ...}``) item or stream image; ``MalformedItem`` if bad."""
        pk = str_attr(item, ATTR.pk)
        key = pk or "<no Pk>"
        if pk is None:
            raise MalformedItem(key, f"{ATTR.pk} is missing or not a string")
        try:
            conn_id = validate_conn_id(conn_id_from_pk(pk))
        except ValueError as exc:
            raise MalformedItem(key, str(exc)) from None
        p = _Parser(key, item)
        # Not carried here (read from the raw item where used), but a mistyped one is the
        # item's error: read as unset, a single_connection of {"S": "yes"} let a second
        # connection open, the very thing it forbids. (A weight that is not a number only
        # counts as 1: ``weight_of``.)
        p.check_bool(ATTR.single_connection)
        state = p.req_str(ATTR.desired_state, 16)
        if state not in (STARTED, STOPPED):
            raise MalformedItem(
                key, f"{ATTR.desired_state} must be STARTED or STOPPED, not {state[:20]!r}")
        return cls(
            conn_id=conn_id,
            desired_state=state,
            ws_url=p.req_str(ATTR.ws_url, MAX_URL_LEN),
            lease_owner=p.opt_str(ATTR.lease_owner, MAX_OWNER_LEN),
            lease_expires_at_ms=p.opt_int(ATTR.lease_expires_at_ms, 0, MAX_TIMESTAMP_MS),
            # Both are compared by the protocol's conditions (``expressions``), which do not
            # take a NULL for absent.
            last_seq=p.opt_int(ATTR.last_seq, -1, MAX_SEQ, null_ok=False),
            epoch=p.opt_int(ATTR.epoch, 0, MAX_EPOCH, null_ok=False) or 0,
            status=p.opt_str(ATTR.status, 64),
            last_error=p.opt_str(ATTR.last_error, 4096),
            error_count=p.opt_int(ATTR.error_count, 0, 10**6) or 0,
            successor=_successor(item),
        )


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as its holder knows it after a successful acquire or renew.

    ``unowned_ms``: set by the acquire only, how long the stream was unowned before it (None
    when there is nothing to measure, see ``holdfast.core.unowned``).
    """

    conn_id: str
    owner: str
    epoch: int
    expires_at_ms: int
    ws_url: str
    last_seq: int | None
    error_count: int = 0
    unowned_ms: int | None = None
    # Rebalancing: the stream's weight (its ``weight`` attribute, default 1) and when a move
    # last handed it on (None: never), read by the acquire.
    weight: float = 1.0
    moved_at_ms: int | None = None
    # The item's ``single_connection`` (None: not set, the fleet default decides).
    single_connection: bool | None = None


MAX_WEIGHT = 1_000_000.0


def weight_of(item: Mapping[str, Any]) -> float:
    """A stream's ``weight`` (default 1); a missing, malformed or absurd one counts as 1."""
    value = item.get(ATTR.weight)
    n = value.get("N") if isinstance(value, Mapping) else None
    try:
        w = float(n) if isinstance(n, str) else 1.0
    except ValueError:
        return 1.0
    return w if 0 < w <= MAX_WEIGHT else 1.0


def int_attr(item: Mapping[str, Any], name: str) -> int | None:
    """The integer in ``item[name]`` (DynamoDB JSON ``{"N": ...}``); None if absent or not one."""
    value = item.get(name)
    n = value.get("N") if isinstance(value, Mapping) else None
    try:
        return int(n) if isinstance(n, str) else None
    except ValueError:
        return None


def lease_of(item: LeaseItem, raw: Mapping[str, Any], owner: str, *,
             unowned_ms: int | None) -> Lease:
    """The lease ``owner`` holds on ``item`` (an acquire's result, or a handoff's read-back);
    ``raw`` is the same item as stored, for what the parsed item does not carry (weight, last
    move, single_connection). An item without an expiry (the caller has checked it has one)
    gets 0."""
    return Lease(item.conn_id, owner, item.epoch, item.lease_expires_at_ms or 0, item.ws_url,
                 item.last_seq, item.error_count, unowned_ms=unowned_ms, weight=weight_of(raw),
                 moved_at_ms=int_attr(raw, ATTR.moved_at_ms),
                 single_connection=bool_attr(raw, ATTR.single_connection))


@dataclass(frozen=True, slots=True)
class StoredItem:
    """A lease item as read: parsed, and as stored (``raw``), for what ``LeaseItem`` does not
    carry (weight, last move, ``single_connection``)."""

    item: LeaseItem
    raw: Mapping[str, Any]

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> StoredItem:
        """``raw`` parsed; ``MalformedItem`` if it breaks the schema."""
        return cls(LeaseItem.from_ddb(raw), raw)

    @property
    def single_connection(self) -> bool | None:
        """The item's ``single_connection`` attribute (None: it does not say)."""
        return bool_attr(self.raw, ATTR.single_connection)

    @property
    def moved_at_ms(self) -> int | None:
        return int_attr(self.raw, ATTR.moved_at_ms)

    def lease(self, owner: str, *, unowned_ms: int | None = None) -> Lease:
        """``lease_of`` this item for ``owner``."""
        return lease_of(self.item, self.raw, owner, unowned_ms=unowned_ms)


def one_connection_only(attr: bool | None, fleet_default: bool) -> bool:
    """Whether a stream's upstream allows one connection at a time: its ``single_connection``
    attribute (``attr``, None if unset), else the fleet's ``HOLDFAST_SINGLE_CONNECTION``."""
    return fleet_default if attr is None else attr


def connects_before_claim(item: LeaseItem, single_connection: bool | None,
                          fleet_default: bool) -> bool:
    """Whether a claimable stream may be connected before its claim (``worker.prestart``):
    no checkpoint yet (nothing the claim could change to resume from) and an upstream that
    allows a second connection (``one_connection_only`` of its ``single_connection``
    attribute). The router, which does not know the fleet's default, passes False: the worker
    applies its own."""
    return item.last_seq is None and not one_connection_only(single_connection, fleet_default)


def bool_attr(item: Mapping[str, Any], name: str) -> bool | None:
    """The boolean in ``item[name]`` (DynamoDB JSON ``{"BOOL": ...}``); None if absent or not
    one."""
    value = item.get(name)
    b = value.get("BOOL") if isinstance(value, Mapping) else None
    return b if isinstance(b, bool) else None


def str_attr(item: Mapping[str, Any], name: str) -> str | None:
    """The string in ``item[name]`` (DynamoDB JSON ``{"S": ...}``); None if absent or not one."""
    value = item.get(name)
    s = value.get("S") if isinstance(value, Mapping) else None
    return s if isinstance(s, str) else None


class _Parser:
    """Reads typed attributes of one item, raising ``MalformedItem`` with the item's key."""

    def __init__(self, key: str, item: AttributeMap) -> None:
        self.key = key
        self.item = item

    def _raw(self, name: str, *, null_ok: bool = True) -> Mapping[str, Any] | None:
        raw = self.item.get(name)
        if isinstance(raw, Mapping) and raw.get("NULL") is True:
            if null_ok:
                return None
            # A condition sees it as present and compares it with nothing: read as absent, a
            # NULL epoch made the stream unclaimable, a NULL checkpoint refused every one.
            raise MalformedItem(self.key, f"{name} is NULL: write a number, or remove it")
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise MalformedItem(self.key, f"{name} is not a DynamoDB attribute value")
        return raw

    def opt_str(self, name: str, max_len: int) -> str | None:
        raw = self._raw(name)
        if raw is None:
            return None
        s = str_attr(self.item, name)
        if s is None:
            raise MalformedItem(self.key, f"{name} must be a string, got {_type_of(raw)}")
        if len(s) > max_len:
            raise MalformedItem(self.key, f"{name} is longer than {max_len} characters")
        return s

    def check_bool(self, name: str) -> None:
        """A boolean, or absent: a typo (``{"S": "yes"}``) is an error, not the default."""
        raw = self._raw(name)
        if raw is not None and not isinstance(raw.get("BOOL"), bool):
            raise MalformedItem(self.key, f'{name} must be a boolean ({{"BOOL": true}}), got '
                                          f"{_type_of(raw)}")

    def req_str(self, name: str, max_len: int) -> str:
        s = self.opt_str(name, max_len)
        if s is None or not s:
            raise MalformedItem(self.key, f"{name} is missing")
        return s

    def opt_int(self, name: str, lo: int, hi: int, *, null_ok: bool = True) -> int | None:
        raw = self._raw(name, null_ok=null_ok)
        if raw is None:
            return None
        n = raw.get("N")
        if not isinstance(n, str):
            raise MalformedItem(self.key, f"{name} must be a number, got {_type_of(raw)}")
        try:
            value = int(n)
        except ValueError:
            raise MalformedItem(self.key, f"{name} must be an integer, got {n[:30]!r}") from None
        if not lo <= value <= hi:
            raise MalformedItem(self.key, f"{name}={value} is outside [{lo}, {hi}]")
        return value


def _successor(item: AttributeMap) -> str | None:
    # Only ever written by our release; anything else there is ignored, not fatal to the item.
    s = str_attr(item, ATTR.successor)
    return s if s and len(s) <= MAX_OWNER_LEN else None


def _type_of(raw: Mapping[str, Any]) -> str:
    return next(iter(raw), "nothing")
