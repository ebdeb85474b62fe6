"""The segment table: one item per handled message, written at most once, behind a fence.

The key is ``conn_id#seq``. Holdfast delivers at least once: after a crash the new owner
resumes from the last checkpoint, so a few messages arrive twice. ``put`` is conditional on
the key being new, so a replay is refused by DynamoDB and the first write stays as written.

The key is deliberately not ``conn_id#epoch#seq``: the epoch (``Message.epoch``, the lease
epoch, higher at every acquisition of the stream) changes at a handover, and the replay after
it comes under the new epoch, so that key would store every replayed segment twice.
``conn_id#seq`` is the right key for an upstream whose seq n is the same message on every
connection (like the demo upstream).

The epoch is the fencing token: every put goes through ``holdfast.sink.fenced_put``, which
keeps the highest epoch written per conn_id in a ``FENCE#<conn_id>`` item of this table and
refuses (``StaleEpoch``) a write at a lower one, in the same transaction as the segment. So a
holder paused past its lease cannot add segments once its successor has written: its seq n+2,
read on its old connection, is not stored before the successor's n+2 (they differ if the
upstream restarted its seqs), and the epochs stored along the seqs never go down. Each item
keeps ``epoch`` (which holder wrote it). Cost: a two-item transaction, 4 write units per
segment instead of 1, and one small fence item per stream.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from holdfast import fenced_put

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import UniversalAttributeValueTypeDef

__all__ = ["TABLE_ENV", "SegmentStore", "segment_key", "table_definition"]

TABLE_ENV = "TRANSCRIPTS_TABLE"


def segment_key(conn_id: str, seq: int) -> str:
    return f"{conn_id}#{seq}"


def table_definition(name: str) -> dict[str, Any]:
    """``create_table`` arguments (the CDK app defines the same key)."""
    return {"TableName": name, "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}]}


class SegmentStore:
    """Idempotent, fenced writes of segments into one table."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self.client, self.table = client, table

    def put(self, conn_id: str, seq: int, text: str, worker_id: str, epoch: int) -> bool:
        """Write the segment; False if it was already written (a replay), True otherwise.

        Raises ``holdfast.sink.StaleEpoch`` (nothing written) if a write at a higher epoch
        for ``conn_id`` came first: this holder has lost the stream.
        """
        item: dict[str, UniversalAttributeValueTypeDef] = {
            "pk": {"S": segment_key(conn_id, seq)}, "conn_id": {"S": conn_id},
            "seq": {"N": str(seq)}, "text": {"S": text}, "worker_id": {"S": worker_id},
            "epoch": {"N": str(epoch)}, "written_at_ms": {"N": str(time.time_ns() // 10**6)}}
        return fenced_put(self.client, self.table, item, conn_id=conn_id, epoch=epoch,
                          condition="attribute_not_exists(pk)")

    def segments(self, conn_id: str) -> dict[int, dict[str, Any]]:
        """seq -> item of every segment of ``conn_id`` (a scan: for tests and small tables)."""
        out: dict[int, dict[str, Any]] = {}
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True,
                                  "FilterExpression": "conn_id = :c",
                                  "ExpressionAttributeValues": {":c": {"S": conn_id}}}
        while True:
            resp = self.client.scan(**kwargs)
            for item in resp.get("Items", []):
                out[int(item["seq"]["N"])] = dict(item)
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
