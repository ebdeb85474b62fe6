"""Worker auto scaling: average connections per task, plus scale-out on unclaimed nudges."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match

from holdfast.core import names
from tests.infra.conftest import resources


def ecs_target(template_json: dict[str, Any]) -> dict[str, Any]:
    (target,) = [t["Properties"] for t in
                 resources(template_json, "AWS::ApplicationAutoScaling::ScalableTarget").values()
                 if t["Properties"]["ServiceNamespace"] == "ecs"]
    return dict(target)


def test_task_count_bounds_come_from_settings(template_json: dict[str, Any]) -> None:
    """The scalable target spans minTasks..maxTasks."""
    target = ecs_target(template_json)
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 10)


def test_target_tracking_on_average_active_connections(template: Any) -> None:
    """Tracks the workers' EMF ActiveConnections average at 70 % of the per-task maximum."""
    template.has_resource_properties("AWS::ApplicationAutoScaling::ScalingPolicy", {
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": Match.object_like({
            "CustomizedMetricSpecification": {
                "Namespace": names.NAMESPACE, "MetricName": names.METRIC_ACTIVE_CONNECTIONS,
                "Dimensions": [{"Name": names.DIMENSION_SERVICE, "Value": "holdfast-worker"}],
                "Statistic": "Average"},
            "TargetValue": 350,
        }),
    })


def test_backlog_step_policy_only_scales_out(template_json: dict[str, Any]) -> None:
    """A claimable stream unowned past a visibility timeout (the sweeper's OldestOrphanAge, in
    ms) adds tasks in steps; nothing in this policy ever removes one. Not the nudge queue's
    oldest message: a back-off's nudge, delayed or held invisible up to 15 minutes, counts in
    that age, and one broken upstream would scale the fleet out."""
    steps = [p["Properties"] for p in
             resources(template_json, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
             if p["Properties"]["PolicyType"] == "StepScaling"]
    assert len(steps) == 1, "a lower (scale-in) step policy must not exist"
    adjustments = steps[0]["StepScalingPolicyConfiguration"]["StepAdjustments"]
    assert [a["ScalingAdjustment"] for a in adjustments] == [1, 2, 4]
    assert [(a.get("MetricIntervalLowerBound"), a.get("MetricIntervalUpperBound"))
            for a in adjustments] == [(0, 90_000), (90_000, 270_000), (270_000, None)]
    assert not [a for a in resources(template_json, "AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("MetricName") == "ApproximateAgeOfOldestMessage"]
    (alarm,) = [a["Properties"] for a in resources(template_json, "AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("MetricName") == names.METRIC_OLDEST_ORPHAN_AGE
                and a["Properties"]["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"]
    assert alarm["Threshold"] == 30_000 and alarm["Statistic"] == "Maximum"
    assert alarm["Dimensions"] == [{"Name": names.DIMENSION_SERVICE, "Value": "holdfast-sweeper"}]
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (3, 2)
