"""The reaper's side of sessions: dead sessions, reaping, platform-reported deaths.

Not the sweeper's alone: ``mark_dead`` and ``reap`` are called by every session sweep
(``sweep_sessions``: the sweeper's, and each worker's reconcile), by ``SessionStore.start``
over its own silent or ended predecessor, and by ``report_dead``; the one condition of each
write makes any of them right, and the first to land wins.

``Reaper`` is the base class of ``SessionStore`` (``holdfast.core.sessions``, which re-exports
this module's public names and imports this one at import time: this one imports it back only
for type checking and, at run time, inside the two methods that need its item types).

A dead session's streams are released in PartiQL batches of up to 25 conditional UPDATEs
(``reap_mode="batch"``: about 11x less client CPU per write than UpdateItem, which is most of a
150-stream failover after the death), or one UpdateItem each (``"single"``, the default of a
store built without a mode: moto's PartiQL ignores conditions, and the IAM of a process may not
grant ``dynamodb:PartiQLUpdate``). Both write the same attributes under the same condition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

from holdfast.core import rules
from holdfast.core.aws import ConditionFailed, call, pages
from holdfast.core.batch import BATCH_LIMIT, RenewMode, run_statements
from holdfast.core.exceptions import HoldfastError
from holdfast.core.expressions import dead_release_clauses, names_for, num
from holdfast.core.model import validate_worker_id
from holdfast.core.schema import (
    ATTR,
    OWNER_INDEX_NAME,
    SESSION,
    SESSION_IS_LIVE,
    SESSION_IS_OVER,
    SessionState,
    conn_id_from_pk,
    pk_for,
    session_guard_terms,
    session_pk_for,
)
from holdfast.core.session_items import ReportedDeath, SessionItem
from holdfast.core.store import wall_clock_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = ["NO_SESSION_ITEM", "REAPED_TTL_S", "REPORT_READS", "Reaper"]

# Why a report of a worker nobody knows did nothing (the operator command says "unknown").
NO_SESSION_ITEM = "no session item for this worker id"
# How long a reaped session item stays visible (holdfast status: recent deaths) before TTL.
REAPED_TTL_S = 86_400
REAP_PARALLEL = 8  # releases (single) or batches of them of one dead session in flight at once
# How long after a session stopped being ALIVE its streams may still be missing from the
# eventually consistent owner index (propagation is normally well under a second). Until then
# the session is not marked reaped, so the next sweep queries the index again.
REAP_SETTLE_MS = 2_000
# What ``report_dead`` reads of a session item (infra pins the reporter's GetItem to these).
REPORT_READS = (SESSION.pk, SESSION.incarnation, SESSION.state, SESSION.expires_at_ms,
                SESSION.heartbeat_at_ms, SESSION.started_at_ms, SESSION.reaped_at_ms,
                SESSION.ended_at_ms)


@dataclass(eq=False)
class Reaper:
    """The dead-session operations of ``SessionStore`` (its base class; not used alone), and
    the fields (the constructor) of both."""

    client: DynamoDBClient
    table: str
    lease_table: str
    _: KW_ONLY
    ttl_ms: int
    skew_ms: int
    clock: Callable[[], int] = wall_clock_ms
    # How ``reap`` releases: PartiQL batches, or one UpdateItem each (see the module docstring).
    reap_mode: RenewMode = "single"

    def _key(self, worker_id: str) -> dict[str, Any]:
        return {SESSION.pk: {"S": session_pk_for(worker_id)}}

    def mark_dead(self, item: SessionItem, *, reason: str = "silent past its TTL",
                  stopped_at_ms: int | None = None) -> bool:
        """Declare an ALIVE session DEAD; True if this call did it. The one DEAD write:
        conditional on the incarnation, ALIVE and silent past TTL + skew, or, when the platform
        reported the process stopped at ``stopped_at_ms``, started before that and silent since
        (no heartbeat more than the skew after it: in the write's condition, so a heartbeat
        landing between the report's read and this write fails it). A late heartbeat cannot
        undo it: it requires ALIVE."""
        cutoff = None if stopped_at_ms is not None else rules.acquire_cutoff_ms(
            self.clock(), self.skew_ms)
        return item.state is SessionState.ALIVE and self._leave_alive(
            "mark_session_dead", item.worker_id, item.incarnation, SessionState.DEAD, reason,
            cutoff_ms=cutoff, stopped_at_ms=stopped_at_ms)

    def _leave_alive(self, op: str, worker_id: str, incarnation: str, state: SessionState,
                     reason: str, *, cutoff_ms: int | None = None,
                     stopped_at_ms: int | None = None) -> bool:
        """The write that ends an ALIVE incarnation (DEAD, or ENDED by its own goodbye); False
        if it is not ALIVE, not that incarnation, (``cutoff_ms``) expires after it, or
        (``stopped_at_ms``) started after or heartbeated more than the skew after it."""
        cond = SESSION_IS_LIVE
        guard_names, guard_values = session_guard_terms(incarnation)
        names = {**guard_names, "#at": SESSION.ended_at_ms, "#why": SESSION.end_reason}
        values = {":new": {"S": state}, ":now": num(self.clock()),
                  ":why": {"S": reason[:200]}, **guard_values}
        if cutoff_ms is not None:
            cond += " AND #exp <= :cutoff"
            names["#exp"] = SESSION.expires_at_ms
            values[":cutoff"] = num(cutoff_ms)
        if stopped_at_ms is not None:
            cond += (" AND (attribute_not_exists(#hb) OR #hb <= :hb_cutoff)"
                     " AND (attribute_not_exists(#started) OR #started <= :stopped)")
            names |= {"#hb": SESSION.heartbeat_at_ms, "#started": SESSION.started_at_ms}
            values |= {":hb_cutoff": num(stopped_at_ms + self.skew_ms),
                       ":stopped": num(stopped_at_ms)}
        try:
            call(op, self.client.update_item, TableName=self.table, Key=self._key(worker_id),
                 UpdateExpression="SET #state = :new, #at = :now, #why = :why",
                 ConditionExpression=cond, ExpressionAttributeNames=names,
                 ExpressionAttributeValues=values)
        except ConditionFailed:
            return False
        return True

    def report_dead(self, worker_id: str, *, stopped_at_ms: int | None,
                    reason: str) -> ReportedDeath:
        """The platform reports ``worker_id``'s process gone: declare it DEAD now, then reap
        (with a stop time, no TTL to wait out: nothing of a stopped task can still use a lease).

        Idempotent (every write is conditional): a DEAD or ENDED session not yet reaped is
        reaped, a reaped or missing one is left alone. ``stopped_at_ms`` guards a reused id: a
        session started after the stop is a newer process under the same id, and stays.
        ``ValueError`` for an invalid worker id.
        """
        item = self.get(validate_worker_id(worker_id), only=REPORT_READS)
        if item is None:
            return ReportedDeath(False, 0, NO_SESSION_ITEM)
        if stopped_at_ms is not None and item.started_at_ms > stopped_at_ms:
            return ReportedDeath(False, 0, f"session {item.owner} started after the task "
                                           "stopped (a newer process under the same id)")
        if stopped_at_ms is not None and item.heartbeat_at_ms > stopped_at_ms + self.skew_ms:
            # Its process wrote after the reported stop: the report is about another process
            # or wrong. Declaring it dead now could give its streams a second deliverer.
            return ReportedDeath(False, 0, f"session {item.owner} heartbeated "
                                           f"{item.heartbeat_at_ms - stopped_at_ms} ms after "
                                           "the reported stop")
        if item.reaped:
            return ReportedDeath(False, 0, f"session {item.owner} is already reaped")
        if stopped_at_ms is None and item.state is SessionState.ALIVE:
            # Without a stop time the report proves nothing about when the process went
            # silent: an ALIVE session is left to the session sweep (the sweeper's, or any
            # worker's reconcile), whose ``mark_dead`` needs it silent past its TTL (the
            # reporter's IAM policy names no expiry, not even for a condition to read).
            return ReportedDeath(False, 0, f"session {item.owner} is alive and the report has "
                                           "no stop time: left to its TTL (the sweeper)")
        declared = stopped_at_ms is not None and self.mark_dead(
            item, reason=f"platform: {reason}", stopped_at_ms=stopped_at_ms)
        if declared:
            item = item.as_dead()
        elif item.state is SessionState.ALIVE:
            # Lost a race: re-read. Another reporter or a sweep made it DEAD (reap it), or
            # a newer incarnation took the id (leave it alone).
            again = self.get(worker_id, only=REPORT_READS)
            if again is None or again.incarnation != item.incarnation:
                return ReportedDeath(False, 0, "replaced by a newer incarnation meanwhile")
            if again.state is SessionState.ALIVE:
                return ReportedDeath(False, 0, f"session {item.owner} heartbeated meanwhile: "
                                               "alive, left to its TTL")
            item = again
        ids, errors = self.reap(item)
        return ReportedDeath(declared, len(ids), None, tuple(ids), tuple(errors))

    def get(self, worker_id: str, *, only: tuple[str, ...] = ()) -> SessionItem | None:
        """The session item of ``worker_id`` (strongly consistent), or None; with ``only``,
        just those attributes (a projection: IAM pins the reporter to ``REPORT_READS``)."""
        from holdfast.core.sessions import SessionItem  # not at module level: a cycle

        projection = {"ProjectionExpression": ", ".join(f"#a{i}" for i in range(len(only))),
                      "ExpressionAttributeNames": {f"#a{i}": a for i, a in enumerate(only)}}
        resp = call("get_session", self.client.get_item, TableName=self.table,
                    Key=self._key(worker_id), ConsistentRead=True, **(projection if only else {}))
        raw = resp.get("Item")
        return SessionItem.from_ddb(raw) if raw else None

    def owned_by(self, owner: str) -> list[str]:
        """Ids of the streams ``owner`` holds (owner index: eventually consistent)."""
        found: list[str] = []
        for resp in pages("find_owned", self.client.query, TableName=self.lease_table,
                          IndexName=OWNER_INDEX_NAME, KeyConditionExpression="#owner = :owner",
                          ExpressionAttributeNames={"#owner": ATTR.lease_owner},
                          ExpressionAttributeValues={":owner": {"S": owner}}):
            for raw in resp.get("Items", []):
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    found.append(conn_id_from_pk(raw[ATTR.pk]["S"]))
        return found

    def release_owned(self, conn_id: str, owner: str, reason: str, *,
                      unowned_since_ms: int | None = None) -> bool:
        """Release one stream of a dead session (conditional on the owner); True if released.

        ``unowned_since_ms`` (default now) is when the stream stopped being served, for the
        unowned-time marker (``holdfast.core.unowned``): a dead holder's last heartbeat.
        """
        now = self.clock()
        update, condition, values = dead_release_clauses(
            owner, reason, now, unowned_since_ms).update_expression()
        try:
            call("release_dead", self.client.update_item, TableName=self.lease_table,
                 Key={ATTR.pk: {"S": pk_for(conn_id)}}, UpdateExpression=update,
                 ConditionExpression=condition,
                 ExpressionAttributeNames=names_for(f"{update} {condition}"),
                 ExpressionAttributeValues=values)
        except ConditionFailed:
            return False  # released already, or the stream moved on
        return True

    def _release_chunk(self, conn_ids: list[str], owner: str, reason: str,
                       unowned_since_ms: int | None) -> list[str | None]:
        """Release ``conn_ids`` (one batch, or one UpdateItem): per stream "ok", None (not
        this owner's any more) or "error: ..." (the session stays unreaped; the next sweep
        tries again)."""

        def alone(conn_id: str) -> str | None:
            # An error on one item (a ``ValidationException`` of an item near 400 KB, a
            # throttled write) is that item's: the others are released.
            try:
                return "ok" if self.release_owned(conn_id, owner, reason,
                                                  unowned_since_ms=unowned_since_ms) else None
            except HoldfastError as exc:
                return f"error: {exc}"[:300]

        if self.reap_mode == "single" or len(conn_ids) == 1:
            return [alone(c) for c in conn_ids]
        now = self.clock()
        outcomes = run_statements(self.client, "release_dead", [
            dead_release_clauses(owner, reason, now, unowned_since_ms).partiql(
                self.lease_table, pk_for(c))
            for c in conn_ids])
        out: list[str | None] = []
        for conn_id, (outcome, message) in zip(conn_ids, outcomes, strict=True):
            if outcome == "ok":
                out.append("ok")
            elif outcome == "condition":
                out.append(None)  # released already, or the stream moved on
            elif outcome == "invalid":
                # Too big, or missing what the marker copies: alone, only a real fault fails.
                out.append(alone(conn_id))
            else:  # throttled or unknown: this item's error; the next sweep retries
                out.append(f"error: release_dead {outcome}: {message}"[:300])
        return out

    def reap(self, item: SessionItem) -> tuple[list[str], list[tuple[str, str]]]:
        """Release every stream of a non-live session, then mark it reaped: the ids this call
        released, and (conn id, error) of each stream it could not."""
        if item.state is SessionState.ALIVE or item.reaped:
            return [], []
        why = f"session {item.owner} {'ended' if item.state is SessionState.ENDED else 'dead'}"
        # Its streams went unserved from its last heartbeat (0: never heartbeat, or not read):
        # the honest start of their unowned time.
        since = item.heartbeat_at_ms or None
        owned = self.owned_by(item.owner)
        step = BATCH_LIMIT if self.reap_mode == "batch" else 1
        chunks = [owned[i:i + step] for i in range(0, len(owned), step)]
        # In parallel: a dead worker's streams should move together, not one round trip after
        # another (100 serial releases are 1-2 s on a busy table before the last is claimable).
        with ThreadPoolExecutor(max_workers=max(1, min(REAP_PARALLEL, len(chunks)))) as pool:
            done = [r for rs in pool.map(
                lambda c: self._release_chunk(c, item.owner, why, since), chunks) for r in rs]
        released = [c for c, r in zip(owned, done, strict=True) if r == "ok"]
        errors = [(c, r) for c, r in zip(owned, done, strict=True) if r and r != "ok"]
        now = self.clock()
        # Reaped (never looked at again) only once the owner index has had time to show every
        # stream the session acquired before it stopped being ALIVE, and then shows none.
        settled = item.ended_at_ms > 0 and now - item.ended_at_ms >= REAP_SETTLE_MS
        if not released and not errors and settled and not self.owned_by(item.owner):
            guard_names, guard_values = session_guard_terms(item.incarnation)
            with contextlib.suppress(ConditionFailed):
                call("reaped_session", self.client.update_item, TableName=self.table,
                     Key=self._key(item.worker_id),
                     UpdateExpression="SET #reaped = :now, #ttl = :ttl",
                     ConditionExpression=SESSION_IS_OVER,
                     ExpressionAttributeNames={"#reaped": SESSION.reaped_at_ms,
                                               "#ttl": SESSION.ttl, **guard_names},
                     ExpressionAttributeValues={":now": num(now),
                                                ":ttl": num(now // 1000 + REAPED_TTL_S),
                                                **guard_values})
        return released, errors
