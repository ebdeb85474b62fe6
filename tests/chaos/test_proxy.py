"""The fault proxy in front of DynamoDB Local: counts at the client, injects each fault kind,
adds up consumed capacity."""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from holdfast.chaos.consumed import CapacityKey, index_keys_of
from holdfast.chaos.proxy import FaultProxy, operation_of
from holdfast.core.boto import new_session
from holdfast.core.schema import GSI_NAME, pk_for, table_definition
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws


def _client(url: str, env: dict[str, str], read_timeout: float = 0.5) -> Any:
    return new_session().client(
        "dynamodb", endpoint_url=url, region_name=env["AWS_REGION"], aws_access_key_id="local",
        aws_secret_access_key="local", config=Config(
            read_timeout=read_timeout, connect_timeout=1, retries={"total_max_attempts": 1}))


def test_operation_of_reads_target_or_action() -> None:
    """The op name comes from X-Amz-Target (JSON protocols) or Action= (query protocol)."""
    assert operation_of({"x-amz-target": "DynamoDB_20120810.UpdateItem"}, b"") == "UpdateItem"
    assert operation_of({}, b"Action=ReceiveMessage&QueueUrl=x") == "ReceiveMessage"
    assert operation_of({}, b"\xff") == "unknown"


def test_counts_and_faults(ddb_local: LocalAws, unique_id: str) -> None:
    """Forwarded calls are counted; error/timeout apply nothing; lost applies but never answers."""
    env = ddb_local.env()
    table = env["HOLDFAST_TABLE"]
    with FaultProxy(env["AWS_ENDPOINT_URL_DYNAMODB"]) as proxy:
        ddb = _client(proxy.url, env)
        direct = _client(env["AWS_ENDPOINT_URL_DYNAMODB"], env)
        assert create_stream(ddb, table, f"{unique_id}-a", "ws://127.0.0.1:1/s/a")
        assert proxy.snapshot() == {"PutItem": 1}
        proxy.inject("error", 5)
        with pytest.raises(ClientError) as err:
            ddb.get_item(TableName=table, Key={"Pk": {"S": f"CONN#{unique_id}-a"}})
        assert err.value.response["Error"]["Code"] == "InternalServerError"
        proxy.inject("timeout", 1.0)
        with pytest.raises((ReadTimeoutError, ConnectionClosedError)):
            ddb.put_item(TableName=table, Item={"Pk": {"S": f"CONN#{unique_id}-t"}})
        assert "Item" not in direct.get_item(TableName=table,
                                             Key={"Pk": {"S": f"CONN#{unique_id}-t"}})
        time.sleep(0.6)
        proxy.inject("lost", 5)
        with pytest.raises(Exception):  # noqa: B017 - botocore raises a connection error type
            ddb.put_item(TableName=table, Item={"Pk": {"S": f"CONN#{unique_id}-l"}})
        assert "Item" in direct.get_item(TableName=table,
                                         Key={"Pk": {"S": f"CONN#{unique_id}-l"}})
        proxy.clear()
        assert "Item" in ddb.get_item(TableName=table, Key={"Pk": {"S": f"CONN#{unique_id}-l"}})
        assert proxy.faulted["PutItem"] == 2 and proxy.faulted["GetItem"] == 1
        assert [w.kind for w in proxy.windows] == ["error", "timeout", "lost"]


def test_capacity_asked_for_and_added_up(ddb_local: LocalAws, unique_id: str) -> None:
    """In capacity mode the proxy asks for INDEXES on a call that did not (DynamoDB Local takes
    the re-written body: it does not verify signatures), adds up the reported units per table
    and index, and estimates the PartiQL batch DynamoDB Local reports nothing for."""
    env = ddb_local.env()
    table = env["HOLDFAST_TABLE"]
    keys = {table: index_keys_of(table_definition(table))}
    with FaultProxy(env["AWS_ENDPOINT_URL_DYNAMODB"], capacity=True, index_keys=keys) as proxy:
        ddb = _client(proxy.url, env, read_timeout=10)
        cid = f"{unique_id}-c"
        assert create_stream(ddb, table, cid, "ws://127.0.0.1:1/s/c")
        resp = ddb.update_item(TableName=table, Key={"Pk": {"S": pk_for(cid)}},
                               UpdateExpression="SET lease_expires_at_ms = :e",
                               ExpressionAttributeValues={":e": {"N": "5"}})
        assert resp["ConsumedCapacity"]["GlobalSecondaryIndexes"][GSI_NAME] == {
            "CapacityUnits": 2.0}
        ddb.batch_execute_statement(Statements=[{
            "Statement": f'UPDATE "{table}" SET lease_expires_at_ms = ? WHERE Pk = ?',
            "Parameters": [{"N": "6"}, {"S": pk_for(cid)}]}])
        got = proxy.snapshot_consumed()
    assert got == {
        CapacityKey("PutItem", "write", table, "table", "reported"): 1.0,
        CapacityKey("PutItem", "write", table, GSI_NAME, "reported"): 1.0,
        CapacityKey("UpdateItem", "write", table, "table", "reported"): 1.0,
        CapacityKey("UpdateItem", "write", table, GSI_NAME, "reported"): 2.0,
        CapacityKey("BatchExecuteStatement", "write", table, "table", "estimated"): 1.0,
        CapacityKey("BatchExecuteStatement", "write", table, GSI_NAME, "estimated"): 2.0}
    assert proxy.snapshot_unpriced() == {}


def test_counting_mode_leaves_bodies_alone(ddb_local: LocalAws, unique_id: str) -> None:
    """Without capacity mode nothing is asked for, so the client gets no ConsumedCapacity."""
    env = ddb_local.env()
    with FaultProxy(env["AWS_ENDPOINT_URL_DYNAMODB"]) as proxy:
        ddb = _client(proxy.url, env, read_timeout=10)
        resp = ddb.get_item(TableName=env["HOLDFAST_TABLE"],
                            Key={"Pk": {"S": pk_for(f"{unique_id}-n")}})
        assert "ConsumedCapacity" not in resp and proxy.snapshot_consumed() == {}


def test_throttle_fault_refuses_a_fraction_with_throttling_codes(ddb_local: LocalAws) -> None:
    """A 50 % throttle refuses about half the calls with DynamoDB's two throttling errors."""
    env = ddb_local.env()
    table = env["HOLDFAST_TABLE"]
    with FaultProxy(env["AWS_ENDPOINT_URL_DYNAMODB"]) as proxy:
        ddb = _client(proxy.url, env, read_timeout=5)
        t0 = time.time_ns() // 10**6
        window = proxy.inject("throttle", 30, fraction=0.5)
        codes: list[str] = []
        for _ in range(60):
            try:
                ddb.get_item(TableName=table, Key={"Pk": {"S": pk_for("nothing")}})
                codes.append("ok")
            except ClientError as exc:
                codes.append(exc.response["Error"]["Code"])
        assert window.fraction == 0.5
        assert set(codes) == {"ok", "ThrottlingException",
                              "ProvisionedThroughputExceededException"}
        assert 15 <= codes.count("ok") <= 45
        assert proxy.calls_between(t0, time.time_ns() // 10**6 + 1) == 60
        assert proxy.faulted["GetItem"] == 60 - codes.count("ok")
