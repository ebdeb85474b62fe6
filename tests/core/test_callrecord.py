"""What the IAM test sees of one AWS call (``holdfast.core.callrecord``): the resource, the
attribute names, the leading key and the PartiQL verbs, from the call's parameters alone."""

from __future__ import annotations

from holdfast.core.callrecord import call_record, component_of_caller


def test_an_update_item_names_its_table_attributes_and_leading_key() -> None:
    """The attribute names come from the key, the names map and the expressions' bare words;
    expression keywords and placeholders are not attributes."""
    rec = call_record("worker", "dynamodb", "UpdateItem", {
        "TableName": "leases", "Key": {"Pk": {"S": "CONN#c1"}},
        "UpdateExpression": "SET #o = :o, last_seq = if_not_exists(last_seq, :s)",
        "ConditionExpression": "attribute_not_exists(lease_owner) AND #e < :e",
        "ExpressionAttributeNames": {"#o": "lease_owner", "#e": "lease_epoch"},
        "ReturnValues": "ALL_OLD"})
    assert rec["resource"] == "leases" and rec["leading_keys"] == ["CONN#c1"]
    assert rec["attributes"] == ["Pk", "last_seq", "lease_epoch", "lease_owner"]
    assert rec["return_values"] == "ALL_OLD"


def test_a_query_on_an_index_and_a_queue_call_name_what_iam_authorises() -> None:
    """An index is its table's ``/index/<name>``; a queue its URL's last part."""
    query = call_record("sweeper", "dynamodb", "Query",
                        {"TableName": "leases", "IndexName": "by-owner"})
    assert query["resource"] == "leases/index/by-owner"
    send = call_record("router", "sqs", "SendMessage",
                       {"QueueUrl": "http://127.0.0.1:1/123/nudges/"})
    assert send["resource"] == "nudges" and "attributes" not in send


def test_a_partiql_batch_names_each_statements_verb_and_table() -> None:
    """Each statement's verb and table: IAM authorises PartiQL per statement."""
    rec = call_record("worker", "dynamodb", "BatchExecuteStatement", {"Statements": [
        {"Statement": 'UPDATE "leases" SET last_seq = ? WHERE Pk = ?'},
        {"Statement": 'SELECT * FROM "leases" WHERE Pk = ?'}]})
    assert rec["statements"] == [{"verb": "UPDATE", "table": "leases"},
                                 {"verb": "SELECT", "table": "leases"}]


def test_code_outside_every_component_is_other() -> None:
    """A caller in none of the components' modules (this test) is ``other``."""
    assert component_of_caller() == "other"
