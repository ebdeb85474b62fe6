"""Read the lease table's change records (DynamoDB Streams) shard by shard, parents first.

This is what Lambda's event source mapping does; in Holdfast a "stream" is always one held
connection, so here the DynamoDB side is "changes", "shards" and "change records".

Shards are listed with ``DescribeStream`` (all pages), again every ``refresh_s`` and at once
when a shard ends. A shard is read only when its parent is fully read (or gone from the
listing), so records of one item never overtake each other across a shard split. Shards present
at start begin at ``start`` (TRIM_HORIZON or LATEST); shards found later begin at their start.
An expired iterator resumes after the last sequence number read; trimmed data restarts at the
trim horizon. ``poll()`` does one ``GetRecords`` per readable shard (concurrently on an executor)
and never sleeps.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.runner.exceptions import ChangesNotFound

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

__all__ = ["ShardReader", "ShardState", "StartPosition", "changes_arn_of", "to_lambda_record"]

log = logging.getLogger(__name__)
StartPosition = Literal["TRIM_HORIZON", "LATEST"]
GET_RECORDS_LIMIT = 1000  # the API maximum


def changes_arn_of(ddb: DynamoDBClient, table: str) -> str:
    """The table's current DynamoDB Streams ARN; ``ChangesNotFound`` if they are off."""
    try:
        desc = ddb.describe_table(TableName=table)["Table"]
    except ClientError as exc:
        raise ChangesNotFound(f"cannot describe table {table!r}: {exc}") from None
    arn = desc.get("LatestStreamArn")
    if not arn or not desc.get("StreamSpecification", {}).get("StreamEnabled", True):
        raise ChangesNotFound(f"table {table!r} has no enabled DynamoDB Streams")
    return arn


def to_lambda_record(raw: dict[str, Any], source_arn: str) -> dict[str, Any]:
    """A ``GetRecords`` record as Lambda delivers it: epoch-second times, base64 binaries."""
    rec = _jsonable(raw)
    assert isinstance(rec, dict)
    rec["eventSourceARN"] = source_arn
    return rec


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return value


@dataclass
class ShardState:
    shard_id: str
    parent_id: str | None
    start: StartPosition
    iterator: str | None = None
    last_seq: str | None = None
    finished: bool = False  # closed and read to the end
    listed: bool = True  # present in the latest DescribeStream
    # The last GetRecords: when it started, how long it took, and the time since the one before.
    read_at: float | None = None
    read_ms: float = 0.0
    gap_ms: float | None = None


class ShardReader:
    """Follows the shards of one table's changes; ``poll()`` returns ``[(shard_id, records)]``."""

    def __init__(self, client: DynamoDBStreamsClient, arn: str, *,
                 start: StartPosition = "TRIM_HORIZON", refresh_s: float = 1.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.arn = arn
        self.start = start
        self.refresh_s = refresh_s
        self.monotonic = monotonic
        self.shards: dict[str, ShardState] = {}
        self._next_refresh = 0.0
        self._first_listing = True

    # -- shard discovery -----------------------------------------------------------------
    def refresh(self) -> None:
        """List the shards (all pages); learn new ones, forget finished ones that are gone."""
        listed: dict[str, str | None] = {}
        kwargs: dict[str, Any] = {"StreamArn": self.arn}
        while True:
            desc = self.client.describe_stream(**kwargs)["StreamDescription"]
            for shard in desc.get("Shards", []):
                listed[shard["ShardId"]] = shard.get("ParentShardId")
            last = desc.get("LastEvaluatedShardId")
            if not last:
                break
            kwargs["ExclusiveStartShardId"] = last
        for shard_id, parent in listed.items():
            if shard_id not in self.shards:
                start: StartPosition = self.start if self._first_listing else "TRIM_HORIZON"
                self.shards[shard_id] = ShardState(shard_id, parent, start)
                log.info("shard %s found (parent %s, starting at %s)",
                         shard_id, parent or "none", start)
        for state in self.shards.values():
            state.listed = state.shard_id in listed
        self.shards = {k: s for k, s in self.shards.items() if s.listed or not s.finished}
        self._first_listing = False
        self._next_refresh = self.monotonic() + self.refresh_s

    def readable(self) -> list[ShardState]:
        """Shards to read now: not finished, and their parent is finished or unknown."""
        out = []
        for state in self.shards.values():
            if state.finished:
                continue
            parent = self.shards.get(state.parent_id) if state.parent_id else None
            if parent is None or parent.finished:
                out.append(state)
        return out

    def prime(self) -> None:
        """Fix the position of every readable shard now (with LATEST, later writes are seen)."""
        for state in self.readable():
            if state.iterator is None:
                state.iterator = self._iterator(state)

    # -- reading ---------------------------------------------------------------------------
    def poll(self, pool: Executor | None = None) -> list[tuple[str, list[dict[str, Any]]]]:
        """One GetRecords per readable shard (at once on ``pool``, if several); change records
        in order per shard."""
        if self.monotonic() >= self._next_refresh:
            self.refresh()
        out: list[tuple[str, list[dict[str, Any]]]] = []
        failed: list[Exception] = []
        states = self.readable()
        read = map if pool is None or len(states) < 2 else pool.map
        for state, records in zip(states, read(functools.partial(
                self._timed_read, failed=failed), states), strict=True):
            if records:
                out.append((state.shard_id, records))
            if state.finished:
                log.info("shard %s read to its end", state.shard_id)
                self._next_refresh = 0.0  # look for its children now
        if failed and not out:
            raise failed[0]  # the caller backs off
        if failed:
            # The others' records are kept: raising here lost them (their positions had
            # moved past them already); the failed shard is read again from its position.
            log.warning("reading %d shard(s) failed, the others' records kept: %s",
                        len(failed), failed[0])
        return out

    def _iterator(self, state: ShardState) -> str | None:
        kwargs: dict[str, Any] = {"StreamArn": self.arn, "ShardId": state.shard_id}
        if state.last_seq is not None:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                          SequenceNumber=state.last_seq)
        else:
            kwargs["ShardIteratorType"] = state.start
        iterator: str | None = self.client.get_shard_iterator(**kwargs).get("ShardIterator")
        return iterator

    def _timed_read(self, state: ShardState, *, failed: list[Exception]) -> list[dict[str, Any]]:
        started = self.monotonic()
        if state.read_at is not None:
            state.gap_ms = (started - state.read_at) * 1000
        state.read_at = started
        try:
            return self._read(state)
        except (BotoCoreError, ClientError) as exc:
            state.iterator = None  # read again after ``last_seq``, which did not move
            failed.append(exc)
            return []
        finally:
            state.read_ms = (self.monotonic() - started) * 1000

    def _read(self, state: ShardState) -> list[dict[str, Any]]:
        try:
            if state.iterator is None:
                state.iterator = self._iterator(state)
                if state.iterator is None:
                    state.finished = True
                    return []
            resp = self.client.get_records(ShardIterator=state.iterator, Limit=GET_RECORDS_LIMIT)
        except ClientError as exc:
            self._on_error(state, exc.response.get("Error", {}).get("Code", ""), exc)
            return []
        records: list[dict[str, Any]] = list(resp.get("Records", []))  # type: ignore[arg-type]
        if records:
            state.last_seq = records[-1]["dynamodb"]["SequenceNumber"]
        state.iterator = resp.get("NextShardIterator")
        if state.iterator is None:
            state.finished = True
        return records

    def _on_error(self, state: ShardState, code: str, exc: Exception) -> None:
        state.iterator = None
        if code == "ExpiredIteratorException":
            log.info("iterator of shard %s expired; resuming after %s",
                     state.shard_id, state.last_seq or state.start)
        elif code == "TrimmedDataAccessException":
            log.warning("shard %s was trimmed past our position; restarting at TRIM_HORIZON",
                        state.shard_id)
            state.last_seq, state.start = None, "TRIM_HORIZON"
        elif code == "ResourceNotFoundException":
            log.warning("shard %s is gone from the table's changes", state.shard_id)
            state.finished = True
        else:
            raise exc

