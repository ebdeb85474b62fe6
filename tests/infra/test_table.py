"""The lease table in the synthesized template: keys, indexes, stream, protection, capacity."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match

from holdfast.core import schema
from tests.infra.conftest import (
    lease_table_id,
    resources,
    scalable_targets,
    session_table_id,
)


def lease_table(template_json: dict[str, Any]) -> dict[str, Any]:
    """The lease table resource (Properties, DeletionPolicy, ...)."""
    return dict(template_json["Resources"][lease_table_id(template_json)])


def test_table_matches_the_shared_schema(template_json: dict[str, Any]) -> None:
    """Keys, both KEYS_ONLY indexes and the NEW_AND_OLD_IMAGES stream mirror holdfast.core."""
    local: dict[str, Any] = schema.table_definition()
    props = lease_table(template_json)["Properties"]
    assert props["KeySchema"] == local["KeySchema"]
    by_name = {a["AttributeName"]: a for a in props["AttributeDefinitions"]}
    assert by_name == {a["AttributeName"]: a for a in local["AttributeDefinitions"]}
    # On demand, an index has exactly the keys and projection of the shared definition.
    assert props["GlobalSecondaryIndexes"] == local["GlobalSecondaryIndexes"]
    assert props["StreamSpecification"] == {
        "StreamViewType": local["StreamSpecification"]["StreamViewType"]}


def test_owner_index_is_keyed_by_lease_owner_keys_only(template_json: dict[str, Any]) -> None:
    """lease_owner-index: partition key lease_owner (a string), no sort key, KEYS_ONLY."""
    props = lease_table(template_json)["Properties"]
    (index,) = [i for i in props["GlobalSecondaryIndexes"]
                if i["IndexName"] == schema.OWNER_INDEX_NAME]
    assert index["KeySchema"] == [{"AttributeName": schema.ATTR.lease_owner, "KeyType": "HASH"}]
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    assert {"AttributeName": schema.ATTR.lease_owner, "AttributeType": "S"} in props[
        "AttributeDefinitions"]


def test_table_defaults_are_safe_and_on_demand(template: Any,
                                               template_json: dict[str, Any]) -> None:
    """Both tables: on demand, point-in-time recovery, deletion protection, retained."""
    found = template.find_resources("AWS::DynamoDB::Table", {
        "Properties": Match.object_like({
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "DeletionProtectionEnabled": True,
            "TableName": Match.absent(),
        }),
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
    })
    assert sorted(found) == sorted(resources(template_json, "AWS::DynamoDB::Table")) == sorted(
        [lease_table_id(template_json), session_table_id(template_json)])


def test_provisioned_option_scales_table_and_both_indexes(
        alt_template: Any, alt_template_json: dict[str, Any]) -> None:
    """Provisioned capacity starts at the minimum and auto-scales the table and each index."""
    table = lease_table(alt_template_json)
    props = table["Properties"]
    assert props.get("BillingMode", "PROVISIONED") == "PROVISIONED"
    assert props["ProvisionedThroughput"] == {"ReadCapacityUnits": 2, "WriteCapacityUnits": 3}
    assert {i["IndexName"]: i["ProvisionedThroughput"]
            for i in props["GlobalSecondaryIndexes"]} == {
        name: {"ReadCapacityUnits": 2, "WriteCapacityUnits": 3}
        for name in (schema.GSI_NAME, schema.OWNER_INDEX_NAME)}
    assert props["TableName"] == "alt-leases" and props["DeletionProtectionEnabled"] is False
    assert table["DeletionPolicy"] == "Delete"
    targets = scalable_targets(alt_template_json, lease_table_id(alt_template_json))
    assert set(targets) == {
        (index, f"dynamodb:{'index' if index else 'table'}:{unit}CapacityUnits")
        for index in ("", schema.GSI_NAME, schema.OWNER_INDEX_NAME)
        for unit in ("Read", "Write")}
    for (_, dimension), target in targets.items():
        expected = (2, 20) if "Read" in dimension else (3, 30)
        assert (target["MinCapacity"], target["MaxCapacity"]) == expected, dimension
    # One target-tracking policy per target of both tables (the session table has two).
    alt_template.resource_properties_count_is("AWS::ApplicationAutoScaling::ScalingPolicy", {
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": Match.object_like({
            "PredefinedMetricSpecification": Match.any_value(), "TargetValue": 70}),
    }, 8)
