"""The lease table in the synthesized template: keys, index, stream, protection, capacity."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match

from holdfast.core import schema
from tests.infra.conftest import one_resource, resources


def test_table_matches_the_shared_schema(template: Any) -> None:
    """Partition key, KEYS_ONLY GSI and NEW_AND_OLD_IMAGES stream come from holdfast.core."""
    local: dict[str, Any] = schema.table_definition()
    template.has_resource_properties("AWS::DynamoDB::Table", {
        "KeySchema": local["KeySchema"],
        "AttributeDefinitions": Match.array_equals(local["AttributeDefinitions"]),
        "GlobalSecondaryIndexes": [{
            "IndexName": schema.GSI_NAME,
            "KeySchema": [
                {"AttributeName": schema.GSI_PARTITION_KEY, "KeyType": "HASH"},
                {"AttributeName": schema.GSI_SORT_KEY, "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        }],
        "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
    })


def test_table_defaults_are_safe_and_on_demand(template: Any) -> None:
    """On demand, point-in-time recovery, deletion protection, retained on stack delete."""
    template.has_resource("AWS::DynamoDB::Table", {
        "Properties": Match.object_like({
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "DeletionProtectionEnabled": True,
            "TableName": Match.absent(),
        }),
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
    })


def test_provisioned_option_scales_table_and_index(alt_template: Any,
                                                   alt_template_json: dict[str, Any]) -> None:
    """Provisioned capacity starts at the minimum and auto-scales reads and writes of both."""
    table = one_resource(alt_template_json, "AWS::DynamoDB::Table")
    props = table["Properties"]
    assert props.get("BillingMode", "PROVISIONED") == "PROVISIONED"
    assert props["ProvisionedThroughput"] == {"ReadCapacityUnits": 2, "WriteCapacityUnits": 3}
    assert props["GlobalSecondaryIndexes"][0]["ProvisionedThroughput"] == {
        "ReadCapacityUnits": 2, "WriteCapacityUnits": 3}
    assert props["TableName"] == "alt-leases" and props["DeletionProtectionEnabled"] is False
    assert table["DeletionPolicy"] == "Delete"
    dims = {t["Properties"]["ScalableDimension"]: t["Properties"]
            for t in resources(alt_template_json,
                               "AWS::ApplicationAutoScaling::ScalableTarget").values()
            if t["Properties"]["ServiceNamespace"] == "dynamodb"}
    assert set(dims) == {"dynamodb:table:ReadCapacityUnits", "dynamodb:table:WriteCapacityUnits",
                         "dynamodb:index:ReadCapacityUnits", "dynamodb:index:WriteCapacityUnits"}
    assert dims["dynamodb:table:WriteCapacityUnits"]["MaxCapacity"] == 30
    assert dims["dynamodb:index:ReadCapacityUnits"]["MinCapacity"] == 2
    alt_template.resource_properties_count_is("AWS::ApplicationAutoScaling::ScalingPolicy", {
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": Match.object_like({
            "PredefinedMetricSpecification": Match.any_value(), "TargetValue": 70}),
    }, 4)
