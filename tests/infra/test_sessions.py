"""The session table in the synthesized template: keys, TTL, no index or stream, capacity."""

from __future__ import annotations

from typing import Any

from holdfast.core import schema
from holdfast.infra.settings import Settings
from tests.infra.conftest import ALT_CONTEXT, scalable_targets, session_table_id


def session_table(template_json: dict[str, Any]) -> dict[str, Any]:
    """The session table resource (Properties, DeletionPolicy, ...)."""
    return dict(template_json["Resources"][session_table_id(template_json)])


def test_session_table_matches_the_shared_schema(template_json: dict[str, Any]) -> None:
    """Key and attribute definitions are those of schema.session_table_definition()."""
    local: dict[str, Any] = schema.session_table_definition()
    props = session_table(template_json)["Properties"]
    assert props["KeySchema"] == local["KeySchema"]
    assert props["AttributeDefinitions"] == local["AttributeDefinitions"]
    assert props["BillingMode"] == local["BillingMode"]


def test_session_table_has_ttl_and_neither_index_nor_stream(
        template_json: dict[str, Any]) -> None:
    """TTL on expire_at_s; a heartbeat writes one item: no GSI, no LSI, no stream."""
    props = session_table(template_json)["Properties"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": schema.SESSION.ttl,
                                                "Enabled": True}
    for absent in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes", "StreamSpecification",
                   "KinesisStreamSpecification"):
        assert absent not in props, absent


def test_session_table_is_protected_like_the_lease_table(template_json: dict[str, Any]) -> None:
    """Point-in-time recovery, deletion protection and Retain, as the lease table has them."""
    table = session_table(template_json)
    props = table["Properties"]
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["DeletionProtectionEnabled"] is True
    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_session_table_follows_the_provisioned_setting(alt_template_json: dict[str, Any]) -> None:
    """Provisioned with the lease table: named after it, auto-scaled, disposable with it."""
    table = session_table(alt_template_json)
    props = table["Properties"]
    assert props.get("BillingMode", "PROVISIONED") == "PROVISIONED"
    assert props["TableName"] == f"{ALT_CONTEXT['tableName']}-sessions"
    assert props["DeletionProtectionEnabled"] is False and table["DeletionPolicy"] == "Delete"
    writes = Settings.from_context(ALT_CONTEXT.get).session_write_capacity
    # maxTasks 10 heartbeating every 0.5 s while refused, twice over during a deployment:
    # above tableWriteMin, and it lifts the maximum.
    assert writes == (40, 40)
    assert props["ProvisionedThroughput"] == {"ReadCapacityUnits": 2,
                                              "WriteCapacityUnits": writes[0]}
    targets = scalable_targets(alt_template_json, session_table_id(alt_template_json))
    assert {dim: (t["MinCapacity"], t["MaxCapacity"]) for (_, dim), t in targets.items()} == {
        "dynamodb:table:ReadCapacityUnits": (2, 20),
        "dynamodb:table:WriteCapacityUnits": writes,
    }
