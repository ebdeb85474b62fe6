"""The sweeper's pass over the session table: silent sessions declared dead, the streams of
dead or ended ones released (``Reaper.mark_dead`` and ``Reaper.reap``,
``holdfast.core.reaping``), the live ones handed on to the rebalancing decider.

Re-exported by ``holdfast.core.sessions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from holdfast.core import rules
from holdfast.core.exceptions import HoldfastError, MalformedItem

if TYPE_CHECKING:
    from holdfast.core.sessions import SessionItem, SessionStore

__all__ = ["ReportedKeys", "SessionSweep", "SweepLog", "sweep_sessions"]


class SweepLog(Protocol):
    """What a session sweep logs through: a ``logging.Logger`` or a Powertools ``Logger``."""

    def info(self, msg: object, *args: object,
             extra: Mapping[str, object] | None = None) -> None: ...

    def error(self, msg: object, *args: object,
              extra: Mapping[str, object] | None = None) -> None: ...


class ReportedKeys:
    """The keys of broken items a process (a Lambda sandbox) has logged: an item that stays
    broken is logged once, not every sweep (86,000 lines a day each at 1 s), and counted
    every pass all the same. Bounded: past ``limit`` keys it forgets, and logs them again."""

    def __init__(self, limit: int = 10_000) -> None:
        self._keys: set[str] = set()
        self.limit = limit

    def first(self, key: str) -> bool:
        """Whether ``key`` is to be logged now (not logged before), noting it."""
        if key in self._keys:
            return False
        if len(self._keys) >= self.limit:
            self._keys.clear()
        self._keys.add(key)
        return True


@dataclass
class SessionSweep:
    dead: list[str] = field(default_factory=list)
    reaped: int = 0
    malformed: int = 0
    # Streams whose release failed, and sessions that could not be swept (both retried by
    # the next sweep).
    item_errors: int = 0
    next_due_ms: int | None = None
    # The sessions alive now (the rebalancing decider's view, from the same Scan).
    alive: list[SessionItem] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # the streams reaped, by id


def sweep_sessions(store: SessionStore, now: int, skew_ms: int, logger: SweepLog,
                   reported: ReportedKeys | None = None) -> SessionSweep:
    """Declare silent sessions dead and release the streams of dead or ended ones.

    One Scan of the session table (one item per worker). A malformed or foreign item is
    counted and skipped (logged once in ``reported``'s process, or every time without it); it
    never stops the others from being handled.
    """
    out = SessionSweep()
    for item in store.scan():
        if isinstance(item, MalformedItem):
            out.malformed += 1
            if reported is None or reported.first(item.key):
                # Never judged, so never declared dead nor reaped: its owners' streams stay
                # owned (the owner audit cannot judge them either).
                logger.error("skipping malformed session item: %s; fix or delete it (its "
                             "worker's streams stay owned until then)", item,
                             extra={"key": item.key[:200], "reason": item.reason[:300]})
            continue
        try:
            _one(store, item, out, now=now, skew_ms=skew_ms, logger=logger)
        except HoldfastError as exc:
            # One session's failed write or read (a throttled owner-index Query, an item near
            # 400 KB): that session waits for the next sweep, the others are handled now.
            out.item_errors += 1
            logger.error("cannot sweep session %s: %s", item.owner, exc,
                         extra={"owner": item.owner, "error": str(exc)[:300]})
    return out


def _one(store: SessionStore, item: SessionItem, out: SessionSweep, *, now: int, skew_ms: int,
         logger: SweepLog) -> None:
    """One session of the sweep: alive, declared dead, or reaped (into ``out``)."""
    action = item.sweep_action(now, skew_ms)
    if action == "wait":  # ALIVE within TTL + skew (the only sessions that wait)
        out.alive.append(item)
        due = rules.claimable_at_ms(item.expires_at_ms, skew_ms)
        out.next_due_ms = due if out.next_due_ms is None else min(out.next_due_ms, due)
        return
    target = item
    if action == "declare_dead" and store.mark_dead(item):
        out.dead.append(item.owner)
        logger.info("session %s declared dead (silent %d ms past its TTL)", item.owner,
                    now - item.expires_at_ms,
                    extra={"owner": item.owner, "held": item.held})
        target = item.as_dead()
    if action in ("declare_dead", "reap"):
        # A session that lost the race (a late heartbeat renewed it) is still ALIVE here,
        # and reap() leaves an ALIVE session alone.
        ids, errors = store.reap(target)
        released = len(ids)
        out.reaped += released
        out.released += ids
        if released:
            logger.info("released %d streams of session %s", released, item.owner,
                        extra={"owner": item.owner, "released": released})
        for conn_id, error in errors:
            out.item_errors += 1
            logger.error("cannot release %s of session %s: %s", conn_id, item.owner,
                         error, extra={"conn_id": conn_id, "owner": item.owner})
