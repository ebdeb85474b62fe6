"""Reading change records (DynamoDB Streams): shard lineage (in-memory API) and DynamoDB Local."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError

from holdfast.core.aws import client_config
from holdfast.core.boto import new_session
from holdfast.localaws import LocalAws
from holdfast.runner.exceptions import ChangesNotFound
from holdfast.runner.shards import ShardReader, changes_arn_of, to_lambda_record
from tests.conftest import client_for
from tests.lambdas.records import image
from tests.runner.fake_shards import FakeChangesApi


def read_all(reader: ShardReader, rounds: int = 10) -> list[tuple[str, list[str]]]:
    out = []
    for _ in range(rounds):
        for shard_id, records in reader.poll():
            out.append((shard_id, [r["dynamodb"]["SequenceNumber"] for r in records]))
    return out


def test_children_are_read_after_their_parent() -> None:
    """A child shard is not read until its parent is read to its end."""
    api = FakeChangesApi()
    api.add_shard("p")
    parent_seqs = api.write("p", 3)
    api.add_shard("c", parent="p")
    child_seqs = api.write("c", 2)
    reader = ShardReader(api, "arn", refresh_s=0)  # type: ignore[arg-type]
    assert read_all(reader, 2) == [("p", parent_seqs)]
    assert "c" not in api.get_records_calls
    api.shards["p"].closed = True
    assert read_all(reader, 3) == [("c", child_seqs)]


def test_new_shards_are_found_and_read_from_their_start() -> None:
    """A shard appearing later is discovered and read from its first record, even from LATEST."""
    api = FakeChangesApi()
    api.add_shard("s1")
    api.write("s1", 2)
    reader = ShardReader(api, "arn", start="LATEST", refresh_s=0)  # type: ignore[arg-type]
    reader.refresh()
    reader.prime()
    assert read_all(reader, 1) == []
    api.shards["s1"].closed = True
    api.add_shard("s2", parent="s1")
    new = api.write("s2", 2)
    assert read_all(reader, 3) == [("s2", new)]


def test_expired_iterator_resumes_after_the_last_record() -> None:
    """An expired iterator is replaced without losing or repeating records."""
    api = FakeChangesApi()
    api.add_shard("s")
    first = api.write("s", 2)
    reader = ShardReader(api, "arn", refresh_s=60)  # type: ignore[arg-type]
    assert read_all(reader, 1) == [("s", first)]
    second = api.write("s", 2)
    api.expire_next = True
    assert read_all(reader, 2) == [("s", second)]


def test_trimmed_shard_restarts_at_the_horizon() -> None:
    """If the position was trimmed away, reading restarts at the oldest record kept."""
    api = FakeChangesApi()
    api.add_shard("s")
    api.write("s", 3)
    reader = ShardReader(api, "arn", start="TRIM_HORIZON", refresh_s=60)  # type: ignore[arg-type]
    reader.refresh()
    reader.prime()
    api.shards["s"].trimmed_before = 2
    assert read_all(reader, 2) == [("s", [f"{3:021d}"])]


def test_finished_shards_are_forgotten_once_gone() -> None:
    """A finished shard that left DescribeStream is dropped from the reader's state."""
    api = FakeChangesApi()
    api.add_shard("old")
    api.shards["old"].closed = True
    reader = ShardReader(api, "arn", refresh_s=0)  # type: ignore[arg-type]
    read_all(reader, 2)
    del api.shards["old"]
    api.add_shard("new", parent="old")
    reader.refresh()
    assert list(reader.shards) == ["new"]
    assert [s.shard_id for s in reader.readable()] == ["new"]


@pytest.fixture
def streams(ddb_local: LocalAws) -> Any:
    env = ddb_local.env()
    return new_session().client(
        "dynamodbstreams", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB_STREAMS"],
        region_name=env["AWS_REGION"], aws_access_key_id="local",
        aws_secret_access_key="local", config=client_config())


class FailsOneRead(FakeChangesApi):
    """The in-memory API, whose next GetRecords of shard ``fail`` raises once."""

    fail: str | None = None

    def get_records(self, ShardIterator: str, Limit: int = 1000) -> dict[str, Any]:
        if self.fail is not None and ShardIterator.startswith(f"{self.fail}|"):
            self.fail = None
            raise ClientError({"Error": {"Code": "InternalServerError"}}, "GetRecords")
        return super().get_records(ShardIterator, Limit)


def test_one_shards_failed_read_keeps_the_others_records() -> None:
    """Shard B's read fails: A's records of the same poll are returned (they were lost, A's
    position already past them), and B's come on the next poll, from where it was."""
    api = FailsOneRead()
    api.add_shard("A")
    api.add_shard("B")
    a_seqs, b_seqs = api.write("A", 3), api.write("B", 1)
    reader = ShardReader(api, "arn")  # type: ignore[arg-type]
    reader.refresh()
    reader.prime()
    api.fail = "B"
    with ThreadPoolExecutor(2) as pool:
        first = reader.poll(pool)
        assert [(s, [r["dynamodb"]["SequenceNumber"] for r in rs]) for s, rs in first] == [
            ("A", a_seqs)]
        assert read_all(reader) == [("B", b_seqs)]


def test_a_failed_read_of_the_only_shard_is_raised() -> None:
    """Nothing read at all: the error reaches the caller, which backs off."""
    api = FailsOneRead()
    api.add_shard("A")
    api.write("A", 1)
    reader = ShardReader(api, "arn")  # type: ignore[arg-type]
    reader.refresh()
    reader.prime()
    api.fail = "A"
    with pytest.raises(ClientError):
        reader.poll()
    assert len(read_all(reader)) == 1


def test_dynamodb_local_records_in_order(ddb_local: LocalAws, streams: Any,
                                         unique_id: str) -> None:
    """From LATEST, a put, update and delete come back as INSERT, MODIFY, REMOVE in order."""
    ddb = client_for(ddb_local, "dynamodb")
    table = ddb_local.table
    reader = ShardReader(streams, changes_arn_of(ddb, table), start="LATEST")
    reader.refresh()
    reader.prime()
    item = image(unique_id, expires=0)
    ddb.put_item(TableName=table, Item=item)
    ddb.update_item(TableName=table, Key={"Pk": item["Pk"]},
                    UpdateExpression="SET lease_owner = :o",
                    ExpressionAttributeValues={":o": {"S": "w1"}})
    ddb.delete_item(TableName=table, Key={"Pk": item["Pk"]})
    mine: list[dict[str, Any]] = []
    deadline = time.monotonic() + 5
    while len(mine) < 3 and time.monotonic() < deadline:
        for _, records in reader.poll():
            mine += [r for r in records if r["dynamodb"]["Keys"]["Pk"] == item["Pk"]]
        time.sleep(0.02)
    assert [r["eventName"] for r in mine] == ["INSERT", "MODIFY", "REMOVE"]
    lam = to_lambda_record(mine[1], reader.arn)
    assert lam["eventSourceARN"] == reader.arn
    assert isinstance(lam["dynamodb"]["ApproximateCreationDateTime"], float)
    assert lam["dynamodb"]["OldImage"] == item
    assert lam["dynamodb"]["NewImage"]["lease_owner"] == {"S": "w1"}


def test_binary_values_become_base64() -> None:
    """Binary attribute values are base64 strings in Lambda events."""
    rec = to_lambda_record({"dynamodb": {"NewImage": {"b": {"B": b"\x00\x01"}}}}, "arn")
    assert rec["dynamodb"]["NewImage"]["b"] == {"B": "AAE="}


def test_table_without_stream_is_a_clear_error(ddb_local: LocalAws, unique_id: str) -> None:
    """Reading a table that has no stream names the table."""
    ddb = client_for(ddb_local, "dynamodb")
    ddb.create_table(TableName=unique_id, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "Pk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "Pk", "KeyType": "HASH"}])
    with pytest.raises(ChangesNotFound, match=unique_id):
        changes_arn_of(ddb, unique_id)
    with pytest.raises(ChangesNotFound, match="no-such"):
        changes_arn_of(ddb, "no-such-table")
