"""An in-memory DynamoDB Streams API with shard splits, for lineage tests.

DynamoDB Local keeps one shard for hours, so shard closure, children and trimming cannot be
provoked on it in a test. This fake answers DescribeStream (paged), GetShardIterator and
GetRecords the way the real API does for those cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

__all__ = ["FakeChangesApi"]


@dataclass
class Shard:
    shard_id: str
    parent: str | None
    records: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    trimmed_before: int = 0


class FakeChangesApi:
    def __init__(self) -> None:
        self.shards: dict[str, Shard] = {}
        self.seq = 0
        self.expire_next = False
        self.get_records_calls: list[str] = []

    def add_shard(self, shard_id: str, parent: str | None = None) -> None:
        self.shards[shard_id] = Shard(shard_id, parent)

    def write(self, shard_id: str, n: int = 1) -> list[str]:
        out = []
        for _ in range(n):
            self.seq += 1
            seq = f"{self.seq:021d}"
            self.shards[shard_id].records.append(
                {"eventName": "INSERT", "dynamodb": {"SequenceNumber": seq}})
            out.append(seq)
        return out

    def describe_stream(self, StreamArn: str, ExclusiveStartShardId: str | None = None,
                        **_: Any) -> dict[str, Any]:
        ids = list(self.shards)
        start = ids.index(ExclusiveStartShardId) + 1 if ExclusiveStartShardId else 0
        page = ids[start:start + 1]  # one shard per page: exercises pagination
        desc: dict[str, Any] = {"Shards": [
            {"ShardId": s, **({"ParentShardId": self.shards[s].parent}
                              if self.shards[s].parent else {})} for s in page]}
        if start + 1 < len(ids):
            desc["LastEvaluatedShardId"] = page[-1]
        return {"StreamDescription": desc}

    def get_shard_iterator(self, StreamArn: str, ShardId: str, ShardIteratorType: str,
                           SequenceNumber: str | None = None) -> dict[str, Any]:
        shard = self.shards[ShardId]
        if ShardIteratorType == "TRIM_HORIZON":
            pos = shard.trimmed_before
        elif ShardIteratorType == "LATEST":
            pos = len(shard.records)
        else:
            seqs = [r["dynamodb"]["SequenceNumber"] for r in shard.records]
            pos = seqs.index(SequenceNumber) + 1
        return {"ShardIterator": f"{ShardId}|{pos}"}

    def get_records(self, ShardIterator: str, Limit: int = 1000) -> dict[str, Any]:
        shard_id, pos_s = ShardIterator.split("|")
        self.get_records_calls.append(shard_id)
        if self.expire_next:
            self.expire_next = False
            raise ClientError({"Error": {"Code": "ExpiredIteratorException"}}, "GetRecords")
        shard, pos = self.shards[shard_id], int(pos_s)
        if pos < shard.trimmed_before:
            raise ClientError({"Error": {"Code": "TrimmedDataAccessException"}}, "GetRecords")
        records = shard.records[pos:pos + Limit]
        end = pos + len(records)
        resp: dict[str, Any] = {"Records": records}
        if not (shard.closed and end >= len(shard.records)):
            resp["NextShardIterator"] = f"{shard_id}|{end}"
        return resp
