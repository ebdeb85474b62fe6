"""Consumed capacity at the client: the request rewrite, the answer parsing, the estimates."""

from __future__ import annotations

import json

from holdfast.chaos.consumed import (
    CapacityKey,
    ask_for_capacity,
    consumed_of,
    estimate_statement,
    index_keys_of,
    statement_shape,
)
from holdfast.core.schema import GSI_NAME, OWNER_INDEX_NAME, table_definition

T = "leases"
KEYS = {T: index_keys_of(table_definition(T))}
DDB = "DynamoDB_20120810."


def _body(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_index_keys_from_the_schema() -> None:
    """Both indexes of the lease table and their key attributes are found."""
    assert KEYS[T] == {GSI_NAME: frozenset({"desired_state", "lease_expires_at_ms"}),
                       OWNER_INDEX_NAME: frozenset({"lease_owner"})}


def test_ask_for_capacity_only_where_accepted() -> None:
    """DynamoDB data calls ask for INDEXES; streams, control-plane and non-JSON bodies do not."""
    asked = ask_for_capacity({"x-amz-target": DDB + "UpdateItem"}, _body({"TableName": T}))
    assert json.loads(asked) == {"TableName": T, "ReturnConsumedCapacity": "INDEXES"}
    upgraded = ask_for_capacity({"x-amz-target": DDB + "Query"},
                                _body({"ReturnConsumedCapacity": "TOTAL"}))
    assert json.loads(upgraded)["ReturnConsumedCapacity"] == "INDEXES"
    for target in ("DynamoDBStreams_20120810.GetRecords", DDB + "DescribeTable", ""):
        assert ask_for_capacity({"x-amz-target": target}, b"{}") == b"{}"
    assert ask_for_capacity({"x-amz-target": DDB + "PutItem"}, b"not json") == b"not json"


def test_reported_indexes_are_split_by_table_and_index() -> None:
    """An INDEXES answer becomes one ledger line per table and index, in the op's kind."""
    reply = _body({"ConsumedCapacity": {
        "TableName": T, "CapacityUnits": 4.0, "Table": {"CapacityUnits": 1.0},
        "GlobalSecondaryIndexes": {GSI_NAME: {"CapacityUnits": 2.0},
                                   OWNER_INDEX_NAME: {"CapacityUnits": 1.0}}}})
    got = dict(consumed_of("UpdateItem", b"{}", 200, reply, KEYS) or [])
    assert got == {CapacityKey("UpdateItem", "write", T, "table", "reported"): 1.0,
                   CapacityKey("UpdateItem", "write", T, GSI_NAME, "reported"): 2.0,
                   CapacityKey("UpdateItem", "write", T, OWNER_INDEX_NAME, "reported"): 1.0}
    query = _body({"ConsumedCapacity": {"TableName": T, "CapacityUnits": 0.5}})
    assert consumed_of("Query", b"{}", 200, query, KEYS) == [
        (CapacityKey("Query", "read", T, "table", "reported"), 0.5)]


def test_transaction_read_and_write_units_kept_apart() -> None:
    """A list of entries with Read/WriteCapacityUnits gives read and write lines."""
    reply = _body({"ConsumedCapacity": [{"TableName": T, "ReadCapacityUnits": 2.0,
                                         "WriteCapacityUnits": 4.0, "CapacityUnits": 6.0}]})
    got = dict(consumed_of("TransactWriteItems", b"{}", 200, reply, KEYS) or [])
    assert got == {CapacityKey("TransactWriteItems", "read", T, "table", "reported"): 2.0,
                   CapacityKey("TransactWriteItems", "write", T, "table", "reported"): 4.0}


def test_statement_shape_reads_only_the_written_attributes() -> None:
    """SET and REMOVE targets before WHERE are written; attributes in WHERE are not."""
    text = (f'UPDATE "{T}" SET last_seq = ? SET updated_at_ms = ? REMOVE lease_owner '
            "WHERE Pk = ? AND lease_expires_at_ms <= ?")
    assert statement_shape(text) == ("UPDATE", T, frozenset(
        {"last_seq", "updated_at_ms", "lease_owner"}))
    assert statement_shape(f'INSERT INTO "{T}" VALUE {{}}') == ("INSERT", T, frozenset())
    assert statement_shape(f'SELECT * FROM "{T}"') is None


def test_estimates_of_partiql_updates() -> None:
    """A checkpoint costs the item only; moving the expiry adds 2 on the seed index; a refused
    statement costs the item only."""
    checkpoint = f'UPDATE "{T}" SET last_seq = ? WHERE Pk = ? AND lease_expires_at_ms <= ?'
    renew = f'UPDATE "{T}" SET lease_expires_at_ms = ? SET last_seq = ? WHERE Pk = ?'
    assert estimate_statement(checkpoint, KEYS) == [(T, "table", 1.0)]
    assert estimate_statement(renew, KEYS) == [(T, "table", 1.0), (T, GSI_NAME, 2.0)]
    assert estimate_statement(renew, KEYS, failed=True) == [(T, "table", 1.0)]
    assert estimate_statement(f'DELETE FROM "{T}" WHERE Pk = ?', KEYS) == [
        (T, "table", 1.0), (T, GSI_NAME, 1.0), (T, OWNER_INDEX_NAME, 1.0)]


def test_unreported_batch_is_estimated_per_statement() -> None:
    """A BatchExecuteStatement answered without capacity is estimated statement by statement."""
    renew = f'UPDATE "{T}" SET lease_expires_at_ms = ? WHERE Pk = ?'
    request = _body({"Statements": [{"Statement": renew}, {"Statement": renew}]})
    reply = _body({"Responses": [{"TableName": T}, {"Error": {"Code": "ConditionalCheckFailed"}}]})
    got = consumed_of("BatchExecuteStatement", request, 200, reply, KEYS) or []
    total: dict[str, float] = {}
    for key, units in got:
        assert key.source == "estimated" and key.kind == "write"
        total[key.part] = total.get(key.part, 0.0) + units
    assert total == {"table": 2.0, GSI_NAME: 2.0}


def test_refused_write_billed_and_other_errors_not() -> None:
    """A refused conditional UpdateItem is 1 estimated unit; a throttle or validation error 0."""
    request = _body({"TableName": T})
    refused = _body({"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"})
    assert consumed_of("UpdateItem", request, 400, refused, KEYS) == [
        (CapacityKey("UpdateItem", "write", T, "table", "estimated"), 1.0)]
    throttled = _body({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException"})
    assert consumed_of("UpdateItem", request, 400, throttled, KEYS) == []


def test_unpriceable_answers_are_none() -> None:
    """A read statement or a data call without any capacity says None (the proxy counts it);
    operations that never report capacity give nothing."""
    select = _body({"Statement": f'SELECT * FROM "{T}"'})
    assert consumed_of("ExecuteStatement", select, 200, b"{}", KEYS) is None
    assert consumed_of("GetItem", b"{}", 200, b"{}", KEYS) is None
    assert consumed_of("DescribeTable", b"{}", 200, b"{}", KEYS) == []
    assert consumed_of("UpdateItem", b"{", 200, b"{}", KEYS) is None


def test_empty_read_costs_the_least_billed() -> None:
    """A query reported as 0 units is estimated at 0.5 on its index (1 if strongly consistent)."""
    zero = _body({"ConsumedCapacity": {"TableName": T, "CapacityUnits": 0.0,
                                       "Table": {"CapacityUnits": 0.0}}})
    query = _body({"TableName": T, "IndexName": GSI_NAME})
    assert consumed_of("Query", query, 200, zero, KEYS) == [
        (CapacityKey("Query", "read", T, GSI_NAME, "estimated"), 0.5)]
    get = _body({"TableName": T, "ConsistentRead": True})
    assert consumed_of("GetItem", get, 200, zero, KEYS) == [
        (CapacityKey("GetItem", "read", T, "table", "estimated"), 1.0)]
    assert consumed_of("UpdateItem", get, 200, zero, KEYS) == []
