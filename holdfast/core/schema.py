"""Names, keys and attributes of the lease table and the nudge queue.

One definition read by ``infra/`` (the CDK stack) and by the embedded local AWS, so a local
table cannot drift from the deployed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "ATTR",
    "BACKSTOP_MS",
    "DEFAULT_DLQ_NAME",
    "DEFAULT_QUEUE_NAME",
    "DEFAULT_SESSION_TABLE_NAME",
    "DEFAULT_TABLE_NAME",
    "DLQ_MAX_RECEIVE_COUNT",
    "GSI_NAME",
    "GSI_PARTITION_KEY",
    "GSI_PROJECTION",
    "GSI_SORT_KEY",
    "OWNER_INDEX_NAME",
    "PARTITION_KEY",
    "PK_PREFIX",
    "QUEUE_VISIBILITY_TIMEOUT_S",
    "SESSION",
    "SESSION_IS_LIVE",
    "SESSION_IS_OVER",
    "SESSION_PREFIX",
    "STARTED",
    "STOPPED",
    "STREAM_VIEW_TYPE",
    "TABLE_NAME_RE",
    "Attributes",
    "LeaseStatus",
    "SessionAttributes",
    "SessionState",
    "conn_id_from_pk",
    "owner_for",
    "pk_for",
    "session_guard_terms",
    "session_of_owner",
    "session_pk_for",
    "session_table_definition",
    "table_definition",
    "worker_of_session_pk",
]

DEFAULT_TABLE_NAME: Final = "holdfast-leases"
DEFAULT_QUEUE_NAME: Final = "holdfast-nudges"
DEFAULT_DLQ_NAME: Final = "holdfast-nudges-dlq"
DEFAULT_SESSION_TABLE_NAME: Final = "holdfast-sessions"

PARTITION_KEY: Final = "Pk"
PK_PREFIX: Final = "CONN#"
# DynamoDB's rule for a table's name (checked before a call, so a typo is a usage error).
TABLE_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
GSI_NAME: Final = "desired_state-lease_expires_at_ms-index"
GSI_PARTITION_KEY: Final = "desired_state"
GSI_SORT_KEY: Final = "lease_expires_at_ms"
# Finds a dead session's streams without a scan. Its key changes only when ownership does
# (acquire sets lease_owner, release removes it), so checkpoints never write to it.
OWNER_INDEX_NAME: Final = "lease_owner-index"
SESSION_PREFIX: Final = "WORKER#"
# While a live session holds a stream, the stream's own expiry is only a far backstop for a
# reaper that never came: refreshed when half of it is gone, so about twice an hour.
BACKSTOP_MS: Final = 3_600_000

STARTED: Final = "STARTED"
STOPPED: Final = "STOPPED"

# A nudge is claimed in well under a second; the visibility timeout only matters for a worker
# that dies between receive and delete, so it is short enough to re-deliver quickly.
QUEUE_VISIBILITY_TIMEOUT_S: Final = 30
GSI_PROJECTION: Final = "KEYS_ONLY"
STREAM_VIEW_TYPE: Final = "NEW_AND_OLD_IMAGES"
# A nudge that no worker could act on this many times is parked in the DLQ for an operator.
DLQ_MAX_RECEIVE_COUNT: Final = 5


@dataclass(frozen=True, slots=True)
class Attributes:
    """Attribute names of a lease item: the public seed schema plus Holdfast's additions."""

    pk: str = PARTITION_KEY
    desired_state: str = "desired_state"
    ws_url: str = "ws_url"
    lease_owner: str = "lease_owner"
    lease_expires_at_ms: str = "lease_expires_at_ms"
    last_seq: str = "last_seq"
    # Holdfast additions.
    epoch: str = "lease_epoch"  # fencing value, +1 on every acquisition
    status: str = "status"  # RUNNING / RELEASED / BACKOFF / INVALID (informational)
    last_error: str = "last_error"
    error_count: str = "error_count"  # consecutive upstream give-ups, drives the retry delay
    updated_at_ms: str = "updated_at_ms"
    # When a wanted stream was last handed back, the epoch and desired state at that moment:
    # the next claim measures how long it was unowned (holdfast.core.unowned).
    unowned_since_ms: str = "unowned_since_ms"
    unowned_epoch: str = "unowned_epoch"
    unowned_desired_state: str = "unowned_desired_state"
    # Rebalancing: an optional per-stream weight (default 1), and when a rebalancing move
    # last handed the stream on (its new holder does not move it again within the cool-down).
    weight: str = "weight"
    moved_at_ms: str = "moved_at_ms"
    # A handoff: the owner a holder released the stream to. Until ``lease_expires_at_ms``
    # (the hold) only that owner may acquire it; then anyone (``store.LeaseStore.acquire``).
    successor: str = "successor"
    # True: the upstream allows one connection at a time, so a handoff never overlaps two
    # (break-before-make); absent: the fleet default (HOLDFAST_SINGLE_CONNECTION).
    single_connection: str = "single_connection"


ATTR: Final = Attributes()


class LeaseStatus(StrEnum):
    """The ``status`` attribute of a lease item (informational; conditions use owner/expiry)."""

    RUNNING = "RUNNING"
    RELEASED = "RELEASED"
    BACKOFF = "BACKOFF"
    INVALID = "INVALID"


class SessionState(StrEnum):
    """A worker session's life: ALIVE while it heartbeats; ENDED when it said goodbye; DEAD
    when the sweeper (or a successor with the same worker id) found it silent past its TTL."""

    ALIVE = "ALIVE"
    ENDED = "ENDED"
    DEAD = "DEAD"


@dataclass(frozen=True, slots=True)
class SessionAttributes:
    """Attribute names of a session item (table of its own, one item per worker id)."""

    pk: str = PARTITION_KEY  # "WORKER#<worker id>"
    incarnation: str = "incarnation"  # random per process: a restart is a new session
    state: str = "session_state"
    expires_at_ms: str = "session_expires_at_ms"
    heartbeat_at_ms: str = "heartbeat_at_ms"
    started_at_ms: str = "started_at_ms"
    worker_version: str = "worker_version"  # HOLDFAST_WORKER_VERSION (absent: not known)
    held: str = "held"  # streams held at the last heartbeat
    capacity: str = "capacity"  # HOLDFAST_MAX_CONNECTIONS
    orders: str = "orders"  # string set of orders: "<verb>#<epoch>:<conn id>" (orders.py)
    ended_at_ms: str = "ended_at_ms"
    end_reason: str = "end_reason"
    reaped_at_ms: str = "reaped_at_ms"  # all its streams released: nothing left to do
    ttl: str = "expire_at_s"  # DynamoDB TTL (epoch seconds), set once reaped
    # Rebalancing (holdfast.core.balance, holdfast.core.directives).
    load: str = "load"  # the sum of its streams' weights at the last heartbeat (= held)
    target_share: str = "target_share"  # written by the decider while out of balance
    target_ceiling: str = "target_ceiling"
    shed_at_once: str = "shed_at_once"
    target_until_ms: str = "target_until_ms"  # the target lapses then
    target_issued_ms: str = "target_issued_ms"  # when decided: the later decision wins
    fleet_size: str = "fleet_size"  # live workers the decider saw
    # Where this worker's streams go when it lets them go (JSON [[owner, count], ...]).
    target_successors: str = "target_successors"
    draining: str = "draining"  # BOOL, set by ``holdfast drain``


SESSION: Final = SessionAttributes()

# The two conditions that pin a session write to one incarnation, with the names and values of
# ``session_guard_terms``. While it is ALIVE: every write to a live session (heartbeat, end,
# DEAD, orders, targets, drain), so none lands on a successor or revives a dead one. Once it
# is not: what follows its end (a new incarnation written over it, the reaped mark), so none
# lands on a session that came back or on a newer incarnation.
SESSION_IS_LIVE: Final = "#inc = :inc AND #state = :alive"
SESSION_IS_OVER: Final = "#inc = :inc AND #state <> :alive"


def session_guard_terms(incarnation: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The expression names and values of ``SESSION_IS_LIVE`` and ``SESSION_IS_OVER`` for
    ``incarnation``."""
    return ({"#inc": SESSION.incarnation, "#state": SESSION.state},
            {":inc": {"S": incarnation}, ":alive": {"S": SessionState.ALIVE}})


def session_pk_for(worker_id: str) -> str:
    """The key of the session item of ``worker_id``."""
    return f"{SESSION_PREFIX}{worker_id}"


def worker_of_session_pk(pk: str) -> str:
    """The worker id of a session key; ``ValueError`` if it is not a ``WORKER#`` key."""
    if not pk.startswith(SESSION_PREFIX) or len(pk) == len(SESSION_PREFIX):
        raise ValueError(f"not a session key: {pk[:80]!r}")
    return pk[len(SESSION_PREFIX):]


def owner_for(worker_id: str, incarnation: str) -> str:
    """``lease_owner`` of a stream held by one session: worker id and incarnation.

    Worker ids never contain ``#``, so the owner names both unambiguously, and a restarted
    process with the same id is a different owner: it can never inherit (or renew) the streams
    of its predecessor.
    """
    return f"{worker_id}#{incarnation}"


def session_of_owner(owner: str) -> tuple[str, str] | None:
    """(worker id, incarnation) of a session owner; None for an owner without a session."""
    worker_id, sep, incarnation = owner.rpartition("#")
    if not sep or not worker_id or not incarnation:
        return None
    return worker_id, incarnation


def pk_for(conn_id: str) -> str:
    """The partition key of a connection id."""
    return f"{PK_PREFIX}{conn_id}"


def conn_id_from_pk(pk: str) -> str:
    """The connection id of a partition key; ``ValueError`` if it is not a ``CONN#`` key."""
    if not pk.startswith(PK_PREFIX) or len(pk) == len(PK_PREFIX):
        raise ValueError(f"not a connection key: {pk[:80]!r}")
    return pk[len(PK_PREFIX) :]


def table_definition(name: str = DEFAULT_TABLE_NAME) -> dict[str, object]:
    """``CreateTable`` arguments of the lease table (the local AWS uses them; infra mirrors)."""
    return {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": PARTITION_KEY, "AttributeType": "S"},
            {"AttributeName": GSI_PARTITION_KEY, "AttributeType": "S"},
            {"AttributeName": GSI_SORT_KEY, "AttributeType": "N"},
            {"AttributeName": ATTR.lease_owner, "AttributeType": "S"},
        ],
        "KeySchema": [{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
        "GlobalSecondaryIndexes": [{
            "IndexName": GSI_NAME,
            "KeySchema": [
                {"AttributeName": GSI_PARTITION_KEY, "KeyType": "HASH"},
                {"AttributeName": GSI_SORT_KEY, "KeyType": "RANGE"},
            ],
            # The sweep needs only keys: the cheapest projection keeps index writes small.
            "Projection": {"ProjectionType": GSI_PROJECTION},
        }, {
            "IndexName": OWNER_INDEX_NAME,
            "KeySchema": [{"AttributeName": ATTR.lease_owner, "KeyType": "HASH"}],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        }],
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": STREAM_VIEW_TYPE},
    }


def session_table_definition(name: str = DEFAULT_SESSION_TABLE_NAME) -> dict[str, object]:
    """``CreateTable`` arguments of the session table: no index, no stream.

    The sweeper reads it whole (one small Scan per sweep: one item per worker), so a
    heartbeat writes one item and never an index entry; every worker heartbeats on its own
    partition key.
    """
    return {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": PARTITION_KEY, "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
    }
