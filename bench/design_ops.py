"""The DynamoDB requests of the session design and of the seed's, as botocore arguments.

``bench/capacity.py`` measures exactly these. The worker's session mode is being written
elsewhere; these follow the agreed design (one session heartbeat per worker; a stream written
on claim, release, checkpoint and backstop refresh only), so the measurement need not wait for
it. Every write is conditional like the real one, because a condition can change what a write
touches. Pure functions: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from holdfast.core.schema import (
    ATTR,
    BACKSTOP_MS,
    GSI_NAME,
    OWNER_INDEX_NAME,
    SESSION,
    STARTED,
    SessionState,
    pk_for,
    session_pk_for,
)

__all__ = [
    "Held",
    "acquire",
    "acquire_statement",
    "checkpoint",
    "checkpoint_statement",
    "orphan_query",
    "owner_query",
    "release",
    "release_statement",
    "seed_heartbeat",
    "seed_heartbeat_statement",
    "session_heartbeat",
    "session_item",
    "session_mark_dead",
    "sweep_scan",
]


@dataclass(frozen=True, slots=True)
class Held:
    """A stream as its holder knows it: what every write of a held stream is conditional on."""

    table: str
    conn_id: str
    owner: str
    epoch: int


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def session_item(table: str, worker: str, incarnation: str, now: int, *, ttl_ms: int,
                 held: int = 100, capacity: int = 1000) -> dict[str, Any]:
    """``PutItem`` of a live session as a worker starts it (a realistic size for the scan)."""
    return {"TableName": table, "Item": {
        SESSION.pk: _s(session_pk_for(worker)), SESSION.incarnation: _s(incarnation),
        SESSION.state: _s(SessionState.ALIVE), SESSION.expires_at_ms: _n(now + ttl_ms),
        SESSION.heartbeat_at_ms: _n(now), SESSION.started_at_ms: _n(now),
        SESSION.held: _n(held), SESSION.capacity: _n(capacity)}}


def session_heartbeat(table: str, worker: str, incarnation: str, now: int, *, ttl_ms: int,
                      held: int, capacity: int) -> dict[str, Any]:
    """``UpdateItem``: the worker's one heartbeat, conditional on its incarnation being alive."""
    return {
        "TableName": table, "Key": {SESSION.pk: _s(session_pk_for(worker))},
        "UpdateExpression": "SET #exp = :exp, #hb = :now, #held = :held, #cap = :cap",
        "ConditionExpression": "#inc = :inc AND #state = :alive",
        "ExpressionAttributeNames": {"#exp": SESSION.expires_at_ms, "#hb": SESSION.heartbeat_at_ms,
                                     "#held": SESSION.held, "#cap": SESSION.capacity,
                                     "#inc": SESSION.incarnation, "#state": SESSION.state},
        "ExpressionAttributeValues": {":exp": _n(now + ttl_ms), ":now": _n(now),
                                      ":held": _n(held), ":cap": _n(capacity),
                                      ":inc": _s(incarnation), ":alive": _s(SessionState.ALIVE)},
        "ReturnValues": "ALL_NEW"}


def session_mark_dead(table: str, worker: str, incarnation: str, now: int) -> dict[str, Any]:
    """``UpdateItem`` by the sweeper: a silent session past its expiry becomes DEAD."""
    return {
        "TableName": table, "Key": {SESSION.pk: _s(session_pk_for(worker))},
        "UpdateExpression": "SET #state = :dead, #ended = :now",
        "ConditionExpression": "#inc = :inc AND #state = :alive AND #exp < :now",
        "ExpressionAttributeNames": {"#state": SESSION.state, "#ended": SESSION.ended_at_ms,
                                     "#inc": SESSION.incarnation, "#exp": SESSION.expires_at_ms},
        "ExpressionAttributeValues": {":dead": _s(SessionState.DEAD), ":now": _n(now),
                                      ":inc": _s(incarnation), ":alive": _s(SessionState.ALIVE)}}


def acquire(table: str, conn_id: str, owner: str, now: int, token: str, *,
            lease_ms: int = BACKSTOP_MS) -> dict[str, Any]:
    """``UpdateItem``: a claim. Owner index entry put; seed index entry moves (expiry 0 -> the
    backstop, or the seed's lease with ``lease_ms``)."""
    return {
        "TableName": table, "Key": {ATTR.pk: _s(pk_for(conn_id))},
        "UpdateExpression": "SET #owner = :me, #exp = :exp, #status = :running, #upd = :now, "
                            "#token = :token ADD #epoch :one",
        "ConditionExpression": "#ds = :started AND attribute_not_exists(#owner) AND #exp <= :now",
        "ExpressionAttributeNames": {"#owner": ATTR.lease_owner, "#exp": ATTR.lease_expires_at_ms,
                                     "#status": ATTR.status, "#upd": ATTR.updated_at_ms,
                                     "#token": ATTR.token, "#epoch": ATTR.epoch,
                                     "#ds": ATTR.desired_state},
        "ExpressionAttributeValues": {":me": _s(owner), ":exp": _n(now + lease_ms),
                                      ":running": _s("RUNNING"), ":now": _n(now),
                                      ":token": _s(token), ":one": _n(1),
                                      ":started": _s(STARTED)},
        "ReturnValues": "ALL_NEW"}


def acquire_statement(table: str, conn_id: str, owner: str, now: int, token: str
                      ) -> dict[str, Any]:
    """PartiQL form of ``acquire`` (the item must already have an epoch: PartiQL has no ADD)."""
    return {"Statement": (
        f'UPDATE "{table}" SET {ATTR.lease_owner} = ? SET {ATTR.lease_expires_at_ms} = ? '
        f"SET {ATTR.status} = ? SET {ATTR.updated_at_ms} = ? SET {ATTR.token} = ? "
        f"SET {ATTR.epoch} = {ATTR.epoch} + 1 WHERE {ATTR.pk} = ? AND {ATTR.desired_state} = ? "
        f"AND {ATTR.lease_owner} IS MISSING AND {ATTR.lease_expires_at_ms} <= ?"),
        "Parameters": [_s(owner), _n(now + BACKSTOP_MS), _s("RUNNING"), _n(now), _s(token),
                       _s(pk_for(conn_id)), _s(STARTED), _n(now)]}


def _held_condition() -> str:
    return ("#owner = :me AND #epoch = :epoch AND #ds = :started "
            "AND (attribute_not_exists(#seq) OR #seq <= :seq)")


def checkpoint(h: Held, seq: int, now: int, *, backstop: bool = False) -> dict[str, Any]:
    """``UpdateItem``: a checkpoint (no index key touched); ``backstop``: also the backstop
    refresh, which moves the seed index sort key."""
    update = "SET #seq = :seq, #upd = :now" + (", #exp = :exp" if backstop else "")
    values = {":seq": _n(seq), ":now": _n(now), ":me": _s(h.owner), ":epoch": _n(h.epoch),
              ":started": _s(STARTED)}
    names = {"#seq": ATTR.last_seq, "#upd": ATTR.updated_at_ms, "#owner": ATTR.lease_owner,
             "#epoch": ATTR.epoch, "#ds": ATTR.desired_state}
    if backstop:
        values[":exp"] = _n(now + BACKSTOP_MS)
        names["#exp"] = ATTR.lease_expires_at_ms
    return {"TableName": h.table, "Key": {ATTR.pk: _s(pk_for(h.conn_id))},
            "UpdateExpression": update, "ConditionExpression": _held_condition(),
            "ExpressionAttributeNames": names, "ExpressionAttributeValues": values}


def checkpoint_statement(h: Held, seq: int, now: int, *, backstop: bool = False) -> dict[str, Any]:
    """PartiQL form of ``checkpoint`` (25 of them per ``BatchExecuteStatement``)."""
    sets = f"SET {ATTR.last_seq} = ? SET {ATTR.updated_at_ms} = ?"
    params = [_n(seq), _n(now)]
    if backstop:
        sets += f" SET {ATTR.lease_expires_at_ms} = ?"
        params.append(_n(now + BACKSTOP_MS))
    where = (f"WHERE {ATTR.pk} = ? AND {ATTR.lease_owner} = ? AND {ATTR.epoch} = ? "
             f"AND {ATTR.desired_state} = ? AND ({ATTR.last_seq} IS MISSING OR "
             f"{ATTR.last_seq} <= ?)")
    params += [_s(pk_for(h.conn_id)), _s(h.owner), _n(h.epoch), _s(STARTED), _n(seq)]
    return {"Statement": f'UPDATE "{h.table}" {sets} {where}', "Parameters": params}


def release(h: Held, seq: int, now: int) -> dict[str, Any]:
    """``UpdateItem``: graceful release or the sweeper's for a dead session. Owner index entry
    deleted; seed index entry moves to expiry 0."""
    return {
        "TableName": h.table, "Key": {ATTR.pk: _s(pk_for(h.conn_id))},
        "UpdateExpression": "SET #exp = :zero, #status = :released, #seq = :seq, #upd = :now "
                            "REMOVE #owner",
        "ConditionExpression": "#owner = :me AND #epoch = :epoch "
                               "AND (attribute_not_exists(#seq) OR #seq <= :seq)",
        "ExpressionAttributeNames": {"#exp": ATTR.lease_expires_at_ms, "#status": ATTR.status,
                                     "#seq": ATTR.last_seq, "#upd": ATTR.updated_at_ms,
                                     "#owner": ATTR.lease_owner, "#epoch": ATTR.epoch},
        "ExpressionAttributeValues": {":zero": _n(0), ":released": _s("RELEASED"),
                                      ":seq": _n(seq), ":now": _n(now), ":me": _s(h.owner),
                                      ":epoch": _n(h.epoch)}}


def release_statement(h: Held, seq: int, now: int) -> dict[str, Any]:
    """PartiQL form of ``release``."""
    return {"Statement": (
        f'UPDATE "{h.table}" SET {ATTR.lease_expires_at_ms} = ? SET {ATTR.status} = ? '
        f"SET {ATTR.last_seq} = ? SET {ATTR.updated_at_ms} = ? REMOVE {ATTR.lease_owner} "
        f"WHERE {ATTR.pk} = ? AND {ATTR.lease_owner} = ? AND {ATTR.epoch} = ? "
        f"AND ({ATTR.last_seq} IS MISSING OR {ATTR.last_seq} <= ?)"),
        "Parameters": [_n(0), _s("RELEASED"), _n(seq), _n(now), _s(pk_for(h.conn_id)),
                       _s(h.owner), _n(h.epoch), _n(seq)]}


def seed_heartbeat(h: Held, seq: int, now: int, lease_ms: int) -> dict[str, Any]:
    """``UpdateItem``: the seed's per-stream heartbeat (``LeaseStore.renew``): extends the
    lease (seed index entry moves) and carries the checkpoint."""
    return {
        "TableName": h.table, "Key": {ATTR.pk: _s(pk_for(h.conn_id))},
        "UpdateExpression": "SET #exp = :exp, #upd = :now, #seq = :seq",
        "ConditionExpression": _held_condition() + " AND #exp <= :exp",
        "ExpressionAttributeNames": {"#exp": ATTR.lease_expires_at_ms, "#upd": ATTR.updated_at_ms,
                                     "#seq": ATTR.last_seq, "#owner": ATTR.lease_owner,
                                     "#epoch": ATTR.epoch, "#ds": ATTR.desired_state},
        "ExpressionAttributeValues": {":exp": _n(now + lease_ms), ":now": _n(now),
                                      ":seq": _n(seq), ":me": _s(h.owner), ":epoch": _n(h.epoch),
                                      ":started": _s(STARTED)}}


def seed_heartbeat_statement(h: Held, seq: int, now: int, lease_ms: int) -> dict[str, Any]:
    """PartiQL form of ``seed_heartbeat`` (``holdfast.core.batch``'s statement)."""
    return {"Statement": (
        f'UPDATE "{h.table}" SET {ATTR.lease_expires_at_ms} = ? SET {ATTR.updated_at_ms} = ? '
        f"SET {ATTR.last_seq} = ? WHERE {ATTR.pk} = ? AND {ATTR.lease_owner} = ? "
        f"AND {ATTR.epoch} = ? AND {ATTR.desired_state} = ? "
        f"AND {ATTR.lease_expires_at_ms} <= ? AND ({ATTR.last_seq} IS MISSING OR "
        f"{ATTR.last_seq} <= ?)"),
        "Parameters": [_n(now + lease_ms), _n(now), _n(seq), _s(pk_for(h.conn_id)), _s(h.owner),
                       _n(h.epoch), _s(STARTED), _n(now + lease_ms), _n(seq)]}


def sweep_scan(session_table: str) -> dict[str, Any]:
    """``Scan`` of the session table, eventually consistent (the sweeper, once per sweep)."""
    return {"TableName": session_table, "ConsistentRead": False}


def orphan_query(table: str, now: int, skew_ms: int) -> dict[str, Any]:
    """``Query`` of the seed index: STARTED streams due (the sweeper; the seed's reconcile)."""
    return {"TableName": table, "IndexName": GSI_NAME,
            "KeyConditionExpression": "#ds = :started AND #exp <= :cutoff",
            "ExpressionAttributeNames": {"#ds": ATTR.desired_state,
                                         "#exp": ATTR.lease_expires_at_ms},
            "ExpressionAttributeValues": {":started": _s(STARTED), ":cutoff": _n(now - skew_ms)}}


def owner_query(table: str, owner: str) -> dict[str, Any]:
    """``Query`` of the owner index: every stream a dead session held."""
    return {"TableName": table, "IndexName": OWNER_INDEX_NAME,
            "KeyConditionExpression": "#owner = :owner",
            "ExpressionAttributeNames": {"#owner": ATTR.lease_owner},
            "ExpressionAttributeValues": {":owner": _s(owner)}}
