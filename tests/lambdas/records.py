"""Builders of lease-item images and DynamoDB stream records shaped like the real ones.

Shapes follow what Lambda hands a DynamoDB Streams consumer (NEW_AND_OLD_IMAGES): low-level
attribute values, ``SequenceNumber`` strings, ``eventSourceARN`` of the stream, TTL deletes with
the DynamoDB service as ``userIdentity``.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any

from holdfast.core.schema import ATTR, pk_for

__all__ = ["REGION", "STREAM_ARN", "event", "image", "record"]

REGION = "us-east-1"
STREAM_ARN = (f"arn:aws:dynamodb:{REGION}:123456789012:table/holdfast-leases/stream/"
              "2026-11-29T00:00:00.000")
_seq = itertools.count(4_000_000_000_000_000_001)


def image(conn_id: str, *, state: str = "STARTED", owner: str | None = None,
          expires: int | None = None, epoch: int | None = None, status: str | None = None,
          last_seq: int | None = None, ws_url: str = "wss://feeds.example.test/x",
          **extra: dict[str, Any]) -> dict[str, Any]:
    """A low-level lease item image; attributes left as None are absent."""
    item: dict[str, Any] = {ATTR.pk: {"S": pk_for(conn_id)}, ATTR.desired_state: {"S": state},
                            ATTR.ws_url: {"S": ws_url}}
    if owner is not None:
        item[ATTR.lease_owner] = {"S": owner}
    if expires is not None:
        item[ATTR.lease_expires_at_ms] = {"N": str(expires)}
    if epoch is not None:
        item[ATTR.epoch] = {"N": str(epoch)}
    if status is not None:
        item[ATTR.status] = {"S": status}
    if last_seq is not None:
        item[ATTR.last_seq] = {"N": str(last_seq)}
    item.update(extra)
    return item


def record(event_name: str, old: dict[str, Any] | None, new: dict[str, Any] | None, *,
           seq: str | None = None, ttl: bool = False) -> dict[str, Any]:
    """One stream record as Lambda delivers it."""
    some = new or old or {}
    dynamodb: dict[str, Any] = {
        # Now, in whole seconds as DynamoDB Streams gives it: a fresh record.
        "ApproximateCreationDateTime": float(int(time.time())),
        "Keys": {ATTR.pk: some.get(ATTR.pk, {"S": "CONN#?"})},
        "SequenceNumber": seq or str(next(_seq)),
        "SizeBytes": len(json.dumps([old, new])),
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if new is not None:
        dynamodb["NewImage"] = new
    if old is not None:
        dynamodb["OldImage"] = old
    rec: dict[str, Any] = {
        "eventID": uuid.uuid4().hex, "eventName": event_name, "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": REGION, "dynamodb": dynamodb,
        "eventSourceARN": STREAM_ARN,
    }
    if ttl:
        rec["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return rec


def event(*records: dict[str, Any]) -> dict[str, Any]:
    """A Lambda event holding ``records``."""
    return {"Records": list(records)}
