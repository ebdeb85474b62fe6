"""Worker sessions: one heartbeat per worker keeps every stream it owns alive (etcd/Chubby style).

A session item (table of its own, key ``WORKER#<worker id>``) names the live incarnation of a
worker process. Streams are owned by ``owner_for(worker id, incarnation)``, so a restarted
process (same id, new incarnation) never matches its predecessor's streams.

- ``start``: write a new incarnation. A live one under the same id refuses (``SessionConflict``);
  a silent or ended one is reaped first (its streams released), so none of them is left owned
  by a session that nobody serves.
- ``heartbeat``: one conditional write (``incarnation`` and ALIVE) that extends the session and
  returns pending orders; a DEAD or replaced session raises ``SessionLost``.
- ``mark_dead``: the sweeper's conditional write, true only for a session silent past its TTL
  plus the skew allowance; a late heartbeat cannot undo it (it requires ALIVE).
- ``reap``: release every stream a non-live session owns (owner index, each release conditional
  on the owner), then mark the session reaped with a TTL.
- ``report_dead``: the platform said the process is gone (ECS task STOPPED): declare DEAD at
  once (no TTL to wait out: nothing of a stopped task can still use a lease), then reap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from holdfast.core import rules, unowned
from holdfast.core.aws import ConditionFailed, call
from holdfast.core.exceptions import MalformedItem, SessionConflict, SessionLost
from holdfast.core.model import MAX_TIMESTAMP_MS, validate_worker_id
from holdfast.core.schema import (
    ATTR,
    OWNER_INDEX_NAME,
    SESSION,
    LeaseStatus,
    SessionState,
    conn_id_from_pk,
    owner_for,
    pk_for,
    session_of_owner,
    session_pk_for,
    worker_of_session_pk,
)
from holdfast.core.store import wall_clock_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "REAPED_TTL_S",
    "REPORT_READS",
    "ReportedDeath",
    "Session",
    "SessionItem",
    "SessionStore",
    "SessionSweep",
    "SweepLog",
    "new_incarnation",
    "sweep_sessions",
]

# How long a reaped session item stays visible (holdfast status: recent deaths) before TTL.
REAPED_TTL_S = 86_400
REAP_PARALLEL = 8  # releases of one dead session in flight at once
# What ``report_dead`` reads of a session item (infra pins the reporter's GetItem to these).
REPORT_READS = (SESSION.pk, SESSION.incarnation, SESSION.state, SESSION.expires_at_ms,
                SESSION.heartbeat_at_ms, SESSION.started_at_ms, SESSION.reaped_at_ms)


@dataclass(frozen=True, slots=True)
class ReportedDeath:
    """What ``report_dead`` did: declared the session DEAD, streams released, or why not."""

    declared_dead: bool
    released: int
    skipped_reason: str | None = None
    released_ids: tuple[str, ...] = ()  # the streams this call released


class SweepLog(Protocol):
    """What a session sweep logs through: a ``logging.Logger`` or a Powertools ``Logger``."""

    def info(self, msg: object, *args: object,
             extra: Mapping[str, object] | None = None) -> None: ...

    def error(self, msg: object, *args: object,
              extra: Mapping[str, object] | None = None) -> None: ...


def new_incarnation() -> str:
    return secrets.token_hex(6)


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

    @property
    def owner(self) -> str:
        return owner_for(self.worker_id, self.incarnation)

    @classmethod
    def from_ddb(cls, raw: Mapping[str, Any]) -> SessionItem:
        pk = _s(raw, SESSION.pk) or "<no Pk>"
        try:
            worker_id = validate_worker_id(worker_of_session_pk(pk))
        except ValueError as exc:
            raise MalformedItem(pk, str(exc)) from None
        incarnation = _s(raw, SESSION.incarnation)
        if not incarnation or len(incarnation) > 64 or "#" in incarnation:
            raise MalformedItem(pk, f"{SESSION.incarnation} is missing or invalid")
        try:
            state = SessionState(_s(raw, SESSION.state) or "")
        except ValueError:
            raise MalformedItem(pk, f"{SESSION.state} is not one of "
                                    f"{', '.join(SessionState)}") from None
        expires = _n(raw, SESSION.expires_at_ms, pk)
        if expires is None:
            raise MalformedItem(pk, f"{SESSION.expires_at_ms} is missing")
        orders = raw.get(SESSION.orders, {}).get("SS", []) if isinstance(
            raw.get(SESSION.orders), Mapping) else []
        return cls(worker_id, incarnation, state, expires,
                   _n(raw, SESSION.heartbeat_at_ms, pk) or 0, _n(raw, SESSION.held, pk) or 0,
                   _n(raw, SESSION.capacity, pk) or 0,
                   frozenset(o for o in orders if isinstance(o, str)),
                   _n(raw, SESSION.reaped_at_ms, pk) is not None,
                   _n(raw, SESSION.started_at_ms, pk) or 0)


def _s(raw: Mapping[str, Any], name: str) -> str | None:
    value = raw.get(name)
    s = value.get("S") if isinstance(value, Mapping) else None
    return s if isinstance(s, str) else None


def _n(raw: Mapping[str, Any], name: str, key: str) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    n = value.get("N") if isinstance(value, Mapping) else None
    try:
        number = int(n) if isinstance(n, str) else None
    except ValueError:
        number = None
    if number is None or not 0 <= number <= MAX_TIMESTAMP_MS:
        raise MalformedItem(key, f"{name} must be a non-negative integer")
    return number


class SessionStore:
    """Session operations; ``ddb`` serves both the session table and the lease table."""

    def __init__(self, client: DynamoDBClient, table: str, lease_table: str, *, ttl_ms: int,
                 skew_ms: int, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.client = client
        self.table = table
        self.lease_table = lease_table
        self.ttl_ms = ttl_ms
        self.skew_ms = skew_ms
        self.clock = clock

    def _key(self, worker_id: str) -> dict[str, Any]:
        return {SESSION.pk: {"S": session_pk_for(worker_id)}}

    # -- reads -------------------------------------------------------------------------------
    def get(self, worker_id: str) -> SessionItem | None:
        resp = call("get_session", self.client.get_item, TableName=self.table,
                    Key=self._key(worker_id), ConsistentRead=True)
        raw = resp.get("Item")
        return SessionItem.from_ddb(raw) if raw else None

    def scan(self) -> Iterator[SessionItem | MalformedItem]:
        """Every session item, parsed; a malformed or foreign one comes back as the error."""
        kwargs: dict[str, Any] = {"TableName": self.table}
        while True:
            resp = call("scan_sessions", self.client.scan, **kwargs)
            for raw in resp.get("Items", []):
                try:
                    yield SessionItem.from_ddb(raw)
                except MalformedItem as bad:
                    yield bad
            last = resp.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    # -- the worker's own session ----------------------------------------------------------
    def start(self, worker_id: str, capacity: int, incarnation: str | None = None) -> Session:
        """Begin a new incarnation of ``worker_id``; reap a silent predecessor first.

        ``SessionConflict`` if a live session (heartbeat within TTL + skew) holds the id.
        """
        incarnation = incarnation or new_incarnation()
        old = self.get(worker_id)
        now = self.clock()
        if old is not None and old.state is SessionState.ALIVE and not rules.is_expired(
                old.expires_at_ms, now, self.skew_ms):
            raise SessionConflict(worker_id, old.incarnation, old.expires_at_ms - now)
        if old is not None and not old.reaped:
            if self.mark_dead(old, reason=f"replaced by incarnation {incarnation}"):
                old = _as_dead(old)
            self.reap(old)
        expires = now + self.ttl_ms
        item = {**self._key(worker_id), SESSION.incarnation: {"S": incarnation},
                SESSION.state: {"S": SessionState.ALIVE}, SESSION.expires_at_ms: _num(expires),
                SESSION.heartbeat_at_ms: _num(now), SESSION.started_at_ms: _num(now),
                SESSION.held: _num(0), SESSION.capacity: _num(capacity)}
        cond, names, values = "attribute_not_exists(#pk)", {"#pk": SESSION.pk}, {}
        if old is not None:
            # Only over the predecessor we looked at: a concurrent starter wins or loses whole.
            cond = "#inc = :old AND #state <> :alive"
            names = {"#inc": SESSION.incarnation, "#state": SESSION.state}
            values = {":old": {"S": old.incarnation}, ":alive": {"S": SessionState.ALIVE}}
        try:
            call("start_session", self.client.put_item, TableName=self.table, Item=item,
                 ConditionExpression=cond, ExpressionAttributeNames=names,
                 **({"ExpressionAttributeValues": values} if values else {}))
        except ConditionFailed:
            current = self.get(worker_id)
            raise SessionConflict(worker_id, current.incarnation if current else "?",
                                  0) from None
        return Session(worker_id, incarnation, expires)

    def heartbeat(self, session: Session, *, held: int, capacity: int,
                  done: frozenset[str] = frozenset()) -> tuple[Session, frozenset[str]]:
        """Extend ``session``; returns it and its pending orders. ``SessionLost`` if not ALIVE."""
        now = self.clock()
        expires = now + self.ttl_ms
        update = "SET #exp = :exp, #hb = :now, #held = :held, #cap = :cap"
        values: dict[str, Any] = {":exp": _num(expires), ":now": _num(now), ":held": _num(held),
                                  ":cap": _num(capacity), ":inc": {"S": session.incarnation},
                                  ":alive": {"S": SessionState.ALIVE}}
        if done:
            update += " DELETE #orders :done"
            values[":done"] = {"SS": sorted(done)}
        names = {"#exp": SESSION.expires_at_ms, "#hb": SESSION.heartbeat_at_ms,
                 "#held": SESSION.held, "#cap": SESSION.capacity, "#inc": SESSION.incarnation,
                 "#state": SESSION.state}
        if done:
            names["#orders"] = SESSION.orders
        try:
            resp = call("session_heartbeat", self.client.update_item, TableName=self.table,
                        Key=self._key(session.worker_id), UpdateExpression=update,
                        ConditionExpression="#inc = :inc AND #state = :alive",
                        ExpressionAttributeNames=names, ExpressionAttributeValues=values,
                        ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ConditionFailed as failed:
            raise SessionLost(session.worker_id, session.incarnation,
                              _why_lost(failed.item, session.incarnation)) from None
        orders = resp.get("Attributes", {}).get(SESSION.orders, {}).get("SS", [])
        return Session(session.worker_id, session.incarnation, expires), frozenset(orders)

    def end(self, session: Session, reason: str = "shutdown") -> bool:
        """Say goodbye (ENDED): the sweeper reaps whatever the process could not release."""
        now = self.clock()
        try:
            call("end_session", self.client.update_item, TableName=self.table,
                 Key=self._key(session.worker_id),
                 UpdateExpression="SET #state = :ended, #at = :now, #why = :why",
                 ConditionExpression="#inc = :inc AND #state = :alive",
                 ExpressionAttributeNames={"#state": SESSION.state, "#at": SESSION.ended_at_ms,
                                           "#why": SESSION.end_reason,
                                           "#inc": SESSION.incarnation},
                 ExpressionAttributeValues={":ended": {"S": SessionState.ENDED},
                                            ":now": _num(now), ":why": {"S": reason[:200]},
                                            ":inc": {"S": session.incarnation},
                                            ":alive": {"S": SessionState.ALIVE}})
        except ConditionFailed:
            return False
        return True

    # -- the sweeper's side ------------------------------------------------------------------
    def mark_dead(self, item: SessionItem, *, reason: str = "silent past its TTL") -> bool:
        """Declare an ALIVE session silent past TTL + skew DEAD; True if this call did it."""
        return self._declare_dead(item, reason, rules.acquire_cutoff_ms(self.clock(),
                                                                         self.skew_ms))

    def _declare_dead(self, item: SessionItem, reason: str, cutoff_ms: int | None) -> bool:
        """The one DEAD write: conditional on the incarnation, ALIVE and (``cutoff_ms`` given)
        an expiry at or before it. A late heartbeat cannot undo it: it requires ALIVE."""
        if item.state is not SessionState.ALIVE:
            return False
        cond = "#inc = :inc AND #state = :alive"
        names = {"#state": SESSION.state, "#at": SESSION.ended_at_ms, "#why": SESSION.end_reason,
                 "#inc": SESSION.incarnation}
        values = {":dead": {"S": SessionState.DEAD}, ":now": _num(self.clock()),
                  ":why": {"S": reason[:200]}, ":inc": {"S": item.incarnation},
                  ":alive": {"S": SessionState.ALIVE}}
        if cutoff_ms is not None:
            cond += " AND #exp <= :cutoff"
            names["#exp"] = SESSION.expires_at_ms
            values[":cutoff"] = _num(cutoff_ms)
        try:
            call("mark_session_dead", self.client.update_item, TableName=self.table,
                 Key=self._key(item.worker_id),
                 UpdateExpression="SET #state = :dead, #at = :now, #why = :why",
                 ConditionExpression=cond, ExpressionAttributeNames=names,
                 ExpressionAttributeValues=values)
        except ConditionFailed:
            return False
        return True

    def report_dead(self, worker_id: str, *, stopped_at_ms: int | None,
                    reason: str) -> ReportedDeath:
        """The platform reports ``worker_id``'s process gone: declare it DEAD now, then reap.

        Idempotent (every write is conditional): a DEAD or ENDED session not yet reaped is
        reaped, a reaped or missing one is left alone. ``stopped_at_ms`` guards a reused id: a
        session started after the stop is a newer process under the same id, and stays.
        ``ValueError`` for an invalid worker id.
        """
        item = self._read_for_report(validate_worker_id(worker_id))
        if item is None:
            return ReportedDeath(False, 0, "no session item for this worker id")
        if stopped_at_ms is not None and item.started_at_ms > stopped_at_ms:
            return ReportedDeath(False, 0, f"session {item.owner} started after the task "
                                           "stopped (a newer process under the same id)")
        if item.reaped:
            return ReportedDeath(False, 0, f"session {item.owner} is already reaped")
        declared = self._declare_dead(item, f"platform: {reason}", None)
        if declared:
            item = _as_dead(item)
        elif item.state is SessionState.ALIVE:
            # Lost a race: re-read. Another reporter or the sweeper made it DEAD (reap it), or
            # a newer incarnation took the id (leave it alone).
            again = self._read_for_report(worker_id)
            if again is None or again.incarnation != item.incarnation:
                return ReportedDeath(False, 0, "replaced by a newer incarnation meanwhile")
            item = again
        ids = self.reap_ids(item)
        return ReportedDeath(declared, len(ids), None, tuple(ids))

    def _read_for_report(self, worker_id: str) -> SessionItem | None:
        # A projection (not the whole item): IAM pins the reporter to the attributes it reads.
        resp = call("get_session", self.client.get_item, TableName=self.table,
                    Key=self._key(worker_id), ConsistentRead=True,
                    ProjectionExpression=", ".join(f"#a{i}" for i in range(len(REPORT_READS))),
                    ExpressionAttributeNames={f"#a{i}": a for i, a in enumerate(REPORT_READS)})
        raw = resp.get("Item")
        return SessionItem.from_ddb(raw) if raw else None

    def owned_by(self, owner: str) -> list[str]:
        """Ids of the streams ``owner`` holds (owner index: eventually consistent)."""
        found: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self.lease_table, "IndexName": OWNER_INDEX_NAME,
            "KeyConditionExpression": "#owner = :owner",
            "ExpressionAttributeNames": {"#owner": ATTR.lease_owner},
            "ExpressionAttributeValues": {":owner": {"S": owner}}}
        while True:
            resp = call("find_owned", self.client.query, **kwargs)
            for raw in resp.get("Items", []):
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    found.append(conn_id_from_pk(raw[ATTR.pk]["S"]))
            last = resp.get("LastEvaluatedKey")
            if not last:
                return found
            kwargs["ExclusiveStartKey"] = last

    def release_owned(self, conn_id: str, owner: str, reason: str, *,
                      unowned_since_ms: int | None = None) -> bool:
        """Release one stream of a dead session (conditional on the owner); True if released.

        ``unowned_since_ms`` (default now) is when the stream stopped being served, for the
        unowned-time marker (``holdfast.core.unowned``): a dead holder's last heartbeat.
        """
        now = self.clock()
        try:
            call("release_dead", self.client.update_item, TableName=self.lease_table,
                 Key={ATTR.pk: {"S": pk_for(conn_id)}},
                 UpdateExpression="SET #exp = :zero, #status = :released, #upd = :now, "
                                  f"#err = :why, {unowned.MARK_SET} REMOVE #owner",
                 ConditionExpression="#owner = :owner",
                 ExpressionAttributeNames={"#exp": ATTR.lease_expires_at_ms,
                                           "#status": ATTR.status, "#upd": ATTR.updated_at_ms,
                                           "#err": ATTR.last_error, "#owner": ATTR.lease_owner,
                                           **unowned.MARK_NAMES},
                 ExpressionAttributeValues={":zero": _num(0),
                                            ":released": {"S": LeaseStatus.RELEASED},
                                            ":now": _num(now), ":why": {"S": reason[:500]},
                                            ":owner": {"S": owner}, **unowned.MARK_VALUES,
                                            ":unowned_since": _num(
                                                now if unowned_since_ms is None
                                                else unowned_since_ms)})
        except ConditionFailed:
            return False  # released already, or the stream moved on
        return True

    def reap(self, item: SessionItem) -> int:
        """Release every stream of a non-live session, then mark it reaped; returns released."""
        return len(self.reap_ids(item))

    def reap_ids(self, item: SessionItem) -> list[str]:
        """``reap``, returning the ids of the streams this call released."""
        if item.state is SessionState.ALIVE or item.reaped:
            return []
        why = f"session {item.owner} {'ended' if item.state is SessionState.ENDED else 'dead'}"
        owned = self.owned_by(item.owner)
        # In parallel: a dead worker's streams should move together, not one round trip after
        # another (100 serial releases are 1-2 s on a busy table before the last is claimable).
        with ThreadPoolExecutor(max_workers=max(1, min(REAP_PARALLEL, len(owned)))) as pool:
            # Its streams went unserved from its last heartbeat (0: never heartbeat, or not
            # read): the honest start of their unowned time.
            since = item.heartbeat_at_ms or None
            done = list(pool.map(lambda c: self.release_owned(
                c, item.owner, why, unowned_since_ms=since), owned))
        released = [c for c, ok in zip(owned, done, strict=True) if ok]
        if not released and not self.owned_by(item.owner):
            now = self.clock()
            with contextlib.suppress(ConditionFailed):
                call("reaped_session", self.client.update_item, TableName=self.table,
                     Key=self._key(item.worker_id),
                     UpdateExpression="SET #reaped = :now, #ttl = :ttl",
                     ConditionExpression="#inc = :inc AND #state <> :alive",
                     ExpressionAttributeNames={"#reaped": SESSION.reaped_at_ms,
                                               "#ttl": SESSION.ttl, "#inc": SESSION.incarnation,
                                               "#state": SESSION.state},
                     ExpressionAttributeValues={":now": _num(now),
                                                ":ttl": _num(now // 1000 + REAPED_TTL_S),
                                                ":inc": {"S": item.incarnation},
                                                ":alive": {"S": SessionState.ALIVE}})
        return released

    def add_order(self, owner: str, order: str) -> bool:
        """Give the live session ``owner`` an order (router); False if no such live session."""
        parsed = session_of_owner(owner)
        if parsed is None:
            return False
        worker_id, incarnation = parsed
        try:
            validate_worker_id(worker_id)
            call("add_order", self.client.update_item, TableName=self.table,
                 Key=self._key(worker_id), UpdateExpression="ADD #orders :o",
                 ConditionExpression="#inc = :inc AND #state = :alive",
                 ExpressionAttributeNames={"#orders": SESSION.orders,
                                           "#inc": SESSION.incarnation, "#state": SESSION.state},
                 ExpressionAttributeValues={":o": {"SS": [order]}, ":inc": {"S": incarnation},
                                            ":alive": {"S": SessionState.ALIVE}})
        except (ConditionFailed, ValueError):
            return False
        return True


@dataclass
class SessionSweep:
    dead: list[str] = field(default_factory=list)
    reaped: int = 0
    malformed: int = 0
    next_due_ms: int | None = None


def sweep_sessions(store: SessionStore, now: int, skew_ms: int,
                   logger: SweepLog) -> SessionSweep:
    """Declare silent sessions dead and release the streams of dead or ended ones.

    One Scan of the session table (one item per worker). A malformed or foreign item is
    logged and skipped; it never stops the others from being handled.
    """
    out = SessionSweep()
    for item in store.scan():
        if isinstance(item, MalformedItem):
            out.malformed += 1
            logger.error("skipping malformed session item: %s", item,
                         extra={"key": item.key[:200], "reason": item.reason[:300]})
            continue
        action = rules.session_action(item.state, item.expires_at_ms, item.reaped,
                                      now, skew_ms)
        if action == "wait":
            due = rules.claimable_at_ms(item.expires_at_ms, skew_ms)
            out.next_due_ms = due if out.next_due_ms is None else min(out.next_due_ms, due)
            continue
        target = item
        if action == "declare_dead" and store.mark_dead(item):
            out.dead.append(item.owner)
            logger.info("session %s declared dead (silent %d ms past its TTL)", item.owner,
                        now - item.expires_at_ms,
                        extra={"owner": item.owner, "held": item.held})
            target = _as_dead(item)
        if action in ("declare_dead", "reap"):
            # A session that lost the race (a late heartbeat renewed it) is still ALIVE here,
            # and reap() leaves an ALIVE session alone.
            released = store.reap(target)
            out.reaped += released
            if released:
                logger.info("released %d streams of session %s", released, item.owner,
                            extra={"owner": item.owner, "released": released})
    return out


def _as_dead(item: SessionItem) -> SessionItem:
    return dataclasses.replace(item, state=SessionState.DEAD)


def _why_lost(raw: Mapping[str, Any] | None, incarnation: str) -> str:
    if not raw:
        return "session item deleted"
    if _s(raw, SESSION.incarnation) != incarnation:
        return "replaced by another incarnation"
    return f"session is {_s(raw, SESSION.state) or 'unknown'}"


def _num(n: int) -> dict[str, str]:
    return {"N": str(n)}
