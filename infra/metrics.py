"""CloudWatch metrics of the fleet: Holdfast's own EMF metrics and the AWS ones it watches."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs

from holdfast.core import names

__all__ = ["MINUTE", "FleetParts", "holdfast_metric", "nudges_sent", "running_tasks"]

MINUTE = Duration.minutes(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetParts:
    """The resources the dashboard and alarms watch."""

    queue: sqs.IQueue
    dlq: sqs.IQueue
    router_failures: sqs.IQueue
    router: lambda_.IFunction
    sweeper: lambda_.IFunction
    service: ecs.FargateService
    service_names: dict[str, str]


def holdfast_metric(name: str, service: str, statistic: str = "Sum",
                    label: str | None = None) -> cw.Metric:
    """A Holdfast EMF metric of one component (its ``service`` dimension), per minute."""
    return cw.Metric(namespace=names.NAMESPACE, metric_name=name,
                     dimensions_map={names.DIMENSION_SERVICE: service}, statistic=statistic,
                     period=MINUTE, label=label)


def nudges_sent(service: str, label: str) -> cw.MathExpression:
    """Nudges sent by one component, summed over their ``reason`` dimension.

    Each reason is its own metric; SEARCH finds whichever reasons occurred, SUM adds them.
    """
    query = (f"{{{names.NAMESPACE},{names.DIMENSION_REASON},{names.DIMENSION_SERVICE}}} "
             f'MetricName="{names.METRIC_NUDGES}" {names.DIMENSION_SERVICE}="{service}"')
    return cw.MathExpression(expression=f"SUM(SEARCH('{query}', 'Sum', 60))", label=label,
                             period=MINUTE)


def running_tasks(service: ecs.FargateService) -> cw.Metric:
    """Container Insights' count of running tasks of the worker service."""
    return cw.Metric(namespace="ECS/ContainerInsights", metric_name="RunningTaskCount",
                     dimensions_map={"ClusterName": service.cluster.cluster_name,
                                     "ServiceName": service.service_name},
                     statistic="Minimum", period=MINUTE)
