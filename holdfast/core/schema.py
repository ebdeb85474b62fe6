"""Names, keys and attributes of the lease table and the nudge queue.

One definition read by ``infra/`` (the CDK stack) and by the embedded local AWS, so a local
table cannot drift from the deployed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "ATTR",
    "DEFAULT_DLQ_NAME",
    "DEFAULT_QUEUE_NAME",
    "DEFAULT_TABLE_NAME",
    "DLQ_MAX_RECEIVE_COUNT",
    "GSI_NAME",
    "GSI_PARTITION_KEY",
    "GSI_PROJECTION",
    "GSI_SORT_KEY",
    "PARTITION_KEY",
    "PK_PREFIX",
    "QUEUE_VISIBILITY_TIMEOUT_S",
    "STARTED",
    "STOPPED",
    "STREAM_VIEW_TYPE",
    "Attributes",
    "conn_id_from_pk",
    "pk_for",
    "table_definition",
]

DEFAULT_TABLE_NAME: Final = "holdfast-leases"
DEFAULT_QUEUE_NAME: Final = "holdfast-nudges"
DEFAULT_DLQ_NAME: Final = "holdfast-nudges-dlq"

PARTITION_KEY: Final = "Pk"
PK_PREFIX: Final = "CONN#"
GSI_NAME: Final = "desired_state-lease_expires_at_ms-index"
GSI_PARTITION_KEY: Final = "desired_state"
GSI_SORT_KEY: Final = "lease_expires_at_ms"

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
    token: str = "lease_token"  # random per acquire call: tells our replayed write from others


ATTR: Final = Attributes()


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
        }],
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": STREAM_VIEW_TYPE},
    }
