"""Worker sessions: one heartbeat per worker keeps every stream it owns alive (etcd/Chubby style).

A session item (table of its own, key ``WORKER#<worker id>``) names the live incarnation of a
worker process. Streams are owned by ``owner_for(worker id, incarnation)``, so a restarted
process (same id, new incarnation) never matches its predecessor's streams.

- ``start``: write a new incarnation. A live one under the same id refuses (``SessionConflict``);
  a silent one is declared DEAD (``mark_dead``, the sweep's own write) and it, or an ended one,
  reaped first (its streams released), so none is left owned by a session nobody serves
  (``retire_predecessor``, then ``begin``: the new TTL counts from after the reap).
- ``heartbeat_full``: one conditional write (``incarnation`` and ALIVE) that extends the session
  and returns pending orders; a DEAD or replaced session raises ``SessionLost``.

Here: the worker's own side of ``SessionStore`` (scan, start, heartbeat_full, end,
add_orders). The session item types and their parsing are in ``holdfast.core.session_items``;
the reaper's side (``mark_dead``, ``reap``, ``report_dead``) and ``get`` in
``holdfast.core.reaping``, in ``Reaper``, the base class of ``SessionStore``; the sweep over
sessions (``sweep_sessions``) in ``holdfast.core.session_sweep``. Their public names are
re-exported from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from holdfast.core.aws import ConditionFailed, call, pages
from holdfast.core.directives import Directing, Directive
from holdfast.core.exceptions import MalformedItem, SessionConflict, SessionLost
from holdfast.core.expressions import num, string
from holdfast.core.model import int_attr, str_attr
from holdfast.core.reaping import REAPED_TTL_S, REPORT_READS, Reaper
from holdfast.core.schema import (
    SESSION,
    SESSION_IS_LIVE,
    SESSION_IS_OVER,
    SessionState,
    session_guard_terms,
)
from holdfast.core.session_items import (
    ENDED_AT_STOP,
    Beat,
    ReportedDeath,
    Session,
    SessionItem,
    draining_of,
    new_incarnation,
)
from holdfast.core.session_sweep import SessionSweep, SweepLog, sweep_sessions

__all__ = [
    "REAPED_TTL_S",
    "REPORT_READS",
    "Beat",
    "ReportedDeath",
    "Session",
    "SessionItem",
    "SessionStore",
    "SessionSweep",
    "SweepLog",
    "new_incarnation",
    "sweep_sessions",
]


class SessionStore(Reaper, Directing):
    """Session operations; ``client`` serves both the session table and the lease table."""

    # -- reads -------------------------------------------------------------------------------
    def scan(self, *, consistent: bool = False) -> Iterator[SessionItem | MalformedItem]:
        """Every session item, parsed; a malformed or foreign one comes back as the error.
        ``consistent``: every write that landed before the Scan began is seen (twice the
        read units)."""
        for resp in pages("scan_sessions", self.client.scan, TableName=self.table,
                          ConsistentRead=consistent):
            for raw in resp.get("Items", []):
                try:
                    yield SessionItem.from_ddb(raw)
                except MalformedItem as bad:
                    yield bad

    # -- the worker's own session ----------------------------------------------------------
    def start(self, worker_id: str, capacity: int, incarnation: str | None = None, *,
              version: str = "") -> Session:
        """Begin a new incarnation of ``worker_id``: ``retire_predecessor``, then ``begin``.
        ``SessionConflict`` if a live session (heartbeat within TTL + skew) holds the id."""
        incarnation = incarnation or new_incarnation()
        old, _ = self.retire_predecessor(worker_id, incarnation)
        return self.begin(worker_id, capacity, incarnation, old, version=version)

    def begin(self, worker_id: str, capacity: int, incarnation: str,
              predecessor: SessionItem | None, *, version: str = "") -> Session:
        """Write ``incarnation`` over ``predecessor``, as ``retire_predecessor`` returned it.
        Its TTL counts from this write: a reap of thousands of streams takes seconds, and
        counted from before it, a new session was born fenced."""
        old, now = predecessor, self.clock()
        expires = now + self.ttl_ms
        item = {**self._key(worker_id), SESSION.incarnation: {"S": incarnation},
                SESSION.state: {"S": SessionState.ALIVE}, SESSION.expires_at_ms: num(expires),
                SESSION.heartbeat_at_ms: num(now), SESSION.started_at_ms: num(now),
                SESSION.held: num(0), SESSION.capacity: num(capacity),
                **({SESSION.worker_version: {"S": version}} if version else {})}
        cond, names = "attribute_not_exists(#pk)", {"#pk": SESSION.pk}
        values: dict[str, dict[str, str]] = {}
        if old is not None:
            # Only over the predecessor we looked at: a concurrent starter wins or loses whole.
            cond, (names, values) = SESSION_IS_OVER, session_guard_terms(old.incarnation)
        try:
            call("start_session", self.client.put_item, TableName=self.table, Item=item,
                 ConditionExpression=cond, ExpressionAttributeNames=names,
                 **({"ExpressionAttributeValues": values} if values else {}))
        except ConditionFailed:
            current = self.get(worker_id)
            raise SessionConflict(worker_id, current.incarnation if current else "?",
                                  0) from None
        return Session(worker_id, incarnation, expires)

    def retire_predecessor(self, worker_id: str,
                           incarnation: str) -> tuple[SessionItem | None, bool]:
        """The session item under ``worker_id``, declared dead (if silent) and reaped before
        ``incarnation`` replaces it, and whether this call declared it dead (a death nobody
        else saw: counted as one). ``SessionConflict`` if it is live."""
        old, now = self.get(worker_id), self.clock()
        if old is not None and old.live(now, self.skew_ms):
            raise SessionConflict(worker_id, old.incarnation, old.expires_at_ms - now)
        declared = False
        if old is not None and not old.reaped:
            if declared := self.mark_dead(old, reason=f"replaced by incarnation {incarnation}"):
                old = old.as_dead()
            self.reap(old)
        return old, declared

    def heartbeat_full(self, session: Session, *, held: int, capacity: int,
                       done: frozenset[str] = frozenset(), load: float | None = None) -> Beat:
        """Extend ``session``; its orders, target and drain flag as written now (``Beat``).

        ``SessionLost`` if it is not ALIVE (DEAD, ENDED, replaced or deleted)."""
        now = self.clock()
        expires = now + self.ttl_ms
        update = "SET #exp = :exp, #hb = :now, #held = :held, #cap = :cap, #load = :load"
        guard_names, guard_values = session_guard_terms(session.incarnation)
        values: dict[str, Any] = {":exp": num(expires), ":now": num(now), ":held": num(held),
                                  ":cap": num(capacity), **guard_values,
                                  ":load": Directive.number(held if load is None else load)}
        names = {"#exp": SESSION.expires_at_ms, "#hb": SESSION.heartbeat_at_ms,
                 "#held": SESSION.held, "#cap": SESSION.capacity, **guard_names,
                 "#load": SESSION.load}
        if done:
            update += " DELETE #orders :done"
            values[":done"] = {"SS": sorted(done)}
            names["#orders"] = SESSION.orders
        # Beyond anything a heartbeat of ours could have written (a wall clock stepped back by
        # more than a TTL, an expiry set by hand), or not a number: written over. Kept, such
        # an expiry made every heartbeat a no-op (held, load and the heartbeat time frozen)
        # and kept a dead worker's streams owned until it passed.
        values[":far"], values[":number"] = num(now + 2 * self.ttl_ms), string("N")
        try:
            # Never moves the expiry back: a heartbeat applied after a later one of ours (sent
            # again, or delayed on the way) would have the sweeper declare us dead before
            # our fence passed.
            resp = call("session_heartbeat", self.client.update_item, TableName=self.table,
                        Key=self._key(session.worker_id), UpdateExpression=update,
                        ConditionExpression=f"{SESSION_IS_LIVE} AND (#exp <= :exp OR "
                                            "#exp > :far OR NOT attribute_type(#exp, :number))",
                        ExpressionAttributeNames=names, ExpressionAttributeValues=values,
                        ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ConditionFailed as failed:
            old = failed.item or {}
            if (str_attr(old, SESSION.incarnation) != session.incarnation
                    or str_attr(old, SESSION.state) != SessionState.ALIVE):
                raise SessionLost(session.worker_id, session.incarnation,
                                  _why_lost(failed.item, session.incarnation)) from None
            # Ours and alive, renewed further already (a later heartbeat landed first, or our
            # wall clock stepped back): it stands as it is.
            return _beat_of(session, old, int_attr(old, SESSION.expires_at_ms) or expires)
        return _beat_of(session, resp.get("Attributes", {}), expires)

    def end(self, session: Session, reason: str = ENDED_AT_STOP) -> bool:
        """Say goodbye (ENDED): the sweeper reaps whatever the process could not release."""
        return self._leave_alive("end_session", session.worker_id, session.incarnation,
                                 SessionState.ENDED, reason)

    def add_orders(self, owner: str, orders: Iterable[str]) -> bool:
        """Give the live session ``owner`` orders (router), in one write however many: a
        stop of 100 streams of one worker was 100 writes to its one session item, one after
        the other; False if no such live session."""
        values = sorted(set(orders))
        if not values:
            return True
        return self._conditional(owner, "ADD #orders :o", {"#orders": SESSION.orders},
                                 {":o": {"SS": values}}, op="add_orders")

def _beat_of(session: Session, raw: Mapping[str, Any], expires_at_ms: int) -> Beat:
    """What a heartbeat's answer ``raw`` (the session item) says."""
    orders = raw.get(SESSION.orders, {}).get("SS", [])
    return Beat(Session(session.worker_id, session.incarnation, expires_at_ms),
                frozenset(orders), Directive.from_item(raw), draining_of(raw))


def _why_lost(raw: Mapping[str, Any] | None, incarnation: str) -> str:
    if not raw:
        return "session item deleted"
    if str_attr(raw, SESSION.incarnation) != incarnation:
        return "replaced by another incarnation"
    return f"session is {str_attr(raw, SESSION.state) or 'unknown'}"

