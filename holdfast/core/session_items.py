"""The session items' types as a worker, the sweeper and the reaper see them, and their
parsing (a malformed item is ``MalformedItem``, never a crash). The operations on them are
``holdfast.core.sessions``' (which re-exports these names) and ``holdfast.core.reaping``'s."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from holdfast.core import rules
from holdfast.core.directives import Directive, float_attr
from holdfast.core.exceptions import MalformedItem
from holdfast.core.model import (
    MAX_TIMESTAMP_MS,
    VERSION_PATTERN,
    int_attr,
    str_attr,
    validate_worker_id,
)
from holdfast.core.schema import SESSION, SessionState, owner_for, worker_of_session_pk

__all__ = ["ENDED_AT_STOP", "ENDED_BEFORE_START", "Beat", "ReportedDeath", "Session", "SessionItem",
           "draining_of", "new_incarnation"]

# An ENDED session's ``end_reason`` (for an operator reading the item): its goodbye after a stop,
# or a stop that came while it was being started (it held nothing).
ENDED_AT_STOP: Final = "shutdown"
ENDED_BEFORE_START: Final = "stopped before its start"


@dataclass(frozen=True, slots=True)
class ReportedDeath:
    """What ``report_dead`` did: declared the session DEAD, streams released, or why not."""

    declared_dead: bool
    released: int
    skipped_reason: str | None = None
    released_ids: tuple[str, ...] = ()  # the streams this call released
    not_released: tuple[tuple[str, str], ...] = ()  # (conn id, error): left to the sweeper


@dataclass(frozen=True, slots=True)
class Beat:
    """What one heartbeat returned: the renewed session, its pending orders, its rebalancing
    target (None: none written, or lapsed ones too) and whether it is to drain."""

    session: Session
    orders: frozenset[str]
    directive: Directive | None = None
    draining: bool = False


@dataclass(frozen=True, slots=True)
class Session:
    """A session as its own process knows it."""

    worker_id: str
    incarnation: str
    expires_at_ms: int

    @property
    def owner(self) -> str:
        return owner_for(self.worker_id, self.incarnation)


@dataclass(frozen=True, slots=True)
class SessionItem:
    """A session item as read; ``MalformedItem`` for anything else in the table."""

    worker_id: str
    incarnation: str
    state: SessionState
    expires_at_ms: int
    heartbeat_at_ms: int = 0
    held: int = 0
    capacity: int = 0
    orders: frozenset[str] = field(default_factory=frozenset)
    reaped: bool = False
    started_at_ms: int = 0  # 0: not recorded
    load: float | None = None  # None: not reported (a version before weights): = held
    directive: Directive | None = None
    draining: bool = False
    ended_at_ms: int = 0  # when it stopped being ALIVE (DEAD or ENDED); 0: still ALIVE
    version: str = ""  # HOLDFAST_WORKER_VERSION ("": not known, or not a version)

    @property
    def owner(self) -> str:
        return owner_for(self.worker_id, self.incarnation)

    def live(self, now_ms: int, skew_ms: int) -> bool:
        """ALIVE and not silent past its TTL + skew (``rules.is_expired``) at ``now_ms``: it
        holds its streams, a new incarnation with its id waits for it, an operator's report of
        its death is refused. The one test of it (``liveness.owner_liveness`` says why not)."""
        return self.state is SessionState.ALIVE and not rules.is_expired(
            self.expires_at_ms, now_ms, skew_ms)

    def sweep_action(self, now_ms: int, skew_ms: int) -> str:
        """What the sweeper does with this session: "declare_dead", "reap", "wait" or "none".

        ALIVE and silent past TTL + skew (not ``live``): declare it dead (then reap). ALIVE
        otherwise: wait for its expiry. DEAD or ENDED and not yet reaped: release what it
        still owns."""
        if self.state is SessionState.ALIVE:
            return "wait" if self.live(now_ms, skew_ms) else "declare_dead"
        return "none" if self.reaped else "reap"

    def as_dead(self) -> SessionItem:
        """This item as it is once declared DEAD (the write that did it returns nothing)."""
        return dataclasses.replace(self, state=SessionState.DEAD)

    @classmethod
    def from_ddb(cls, raw: Mapping[str, Any]) -> SessionItem:
        pk = str_attr(raw, SESSION.pk) or "<no Pk>"
        try:
            worker_id = validate_worker_id(worker_of_session_pk(pk))
        except ValueError as exc:
            raise MalformedItem(pk, str(exc)) from None
        incarnation = str_attr(raw, SESSION.incarnation)
        if not incarnation or len(incarnation) > 64 or "#" in incarnation:
            raise MalformedItem(pk, f"{SESSION.incarnation} is missing or invalid")
        try:
            state = SessionState(str_attr(raw, SESSION.state) or "")
        except ValueError:
            raise MalformedItem(pk, f"{SESSION.state} is not one of "
                                    f"{', '.join(SessionState)}") from None
        expires = _n(raw, SESSION.expires_at_ms, pk)
        if expires is None:
            raise MalformedItem(pk, f"{SESSION.expires_at_ms} is missing")
        orders = raw.get(SESSION.orders, {}).get("SS", []) if isinstance(
            raw.get(SESSION.orders), Mapping) else []
        return cls(worker_id, incarnation, state, expires,
                   _info(raw, SESSION.heartbeat_at_ms), _info(raw, SESSION.held),
                   _info(raw, SESSION.capacity),
                   frozenset(o for o in orders if isinstance(o, str)),
                   # A mistyped mark reads as "not reaped": reaped again (what it still owns
                   # released, none), and the mark written over it.
                   _info(raw, SESSION.reaped_at_ms) > 0,
                   _info(raw, SESSION.started_at_ms),
                   float_attr(raw.get(SESSION.load)),
                   Directive.from_item(raw), draining_of(raw),
                   _info(raw, SESSION.ended_at_ms), _version(raw))


def new_incarnation() -> str:
    """A new incarnation id (random: a restarted process never matches its predecessor)."""
    return secrets.token_hex(6)


def _version(raw: Mapping[str, Any]) -> str:
    # Informational: an odd value is not a reason to skip (and so never reap) the session.
    version = str_attr(raw, SESSION.worker_version) or ""
    return version if VERSION_PATTERN.fullmatch(version) else ""


def draining_of(raw: Mapping[str, Any]) -> bool:
    """The session item's drain flag (a worker told to hand its streams on)."""
    value = raw.get(SESSION.draining)
    return isinstance(value, Mapping) and value.get("BOOL") is True


def _info(raw: Mapping[str, Any], name: str) -> int:
    # What the item records but its liveness is not judged by (times, counts): a mistyped or
    # negative one reads as 0 ("not recorded"), as ``_version`` does. Malformed, the item was
    # skipped by every sweep: never declared dead nor reaped, its streams owned for ever.
    number = int_attr(raw, name)
    return number if number is not None and 0 <= number <= MAX_TIMESTAMP_MS else 0


def _n(raw: Mapping[str, Any], name: str, key: str) -> int | None:
    if raw.get(name) is None:
        return None
    number = int_attr(raw, name)
    if number is None or not 0 <= number <= MAX_TIMESTAMP_MS:
        raise MalformedItem(key, f"{name} must be a non-negative integer")
    return number
