"""CloudWatch metrics of the fleet: Holdfast's own EMF metrics and the AWS ones it watches."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs

from holdfast.core import names, schema

__all__ = ["MINUTE", "FleetParts", "TableWatch", "holdfast_metric", "nudges_sent",
           "running_tasks", "throttle_events"]

MINUTE = Duration.minutes(1)


@dataclass(frozen=True, slots=True)
class TableWatch:
    """A table, or one index of it, as alarms and graphs name it."""

    construct_id: str
    label: str
    table: dynamodb.ITable
    index_name: str | None
    impact: str  # what throttling it costs, for the alarm description


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetParts:
    """The resources the dashboard and alarms watch."""

    queue: sqs.IQueue
    dlq: sqs.IQueue
    router_failures: sqs.IQueue
    router: lambda_.IFunction
    sweeper: lambda_.IFunction
    task_stopped: lambda_.IFunction
    # Task-stopped events EventBridge could not deliver, or the function failed on after its
    # retries (its DLQ and on-failure destination).
    task_stopped_failures: sqs.IQueue
    service: ecs.FargateService
    service_names: dict[str, str]
    lease_table: dynamodb.ITable
    session_table: dynamodb.ITable
    # The handler's on-failure queue and its DLQ (``handlerOnFailure=skip`` only).
    handler_failures: sqs.IQueue | None = None
    handler_failures_dlq: sqs.IQueue | None = None

    def throttle_watches(self) -> list[TableWatch]:
        """Every table and index whose throttling hurts: each lease index separately, since
        an index that cannot keep up throttles the table's writes too."""
        return [
            TableWatch("LeaseTable", "lease table", self.lease_table, None,
                       "claims, releases and checkpoints are delayed"),
            TableWatch("SeedIndex", "seed index", self.lease_table, schema.GSI_NAME,
                       "expired leases are found late, and its writes hold up the table's"),
            TableWatch("OwnerIndex", "owner index", self.lease_table, schema.OWNER_INDEX_NAME,
                       "dead sessions' streams are reaped late, and its writes hold up the "
                       "table's"),
            TableWatch("SessionTable", "session table", self.session_table, None,
                       "a worker whose heartbeats are late loses its streams"),
        ]


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


def throttle_events(watch: TableWatch, kind: str, label: str | None = None) -> cw.Metric:
    """``ReadThrottleEvents`` or ``WriteThrottleEvents`` (``kind``) of a table or an index,
    summed per minute.

    An index's throttles are reported under the table's ``TableName`` and the index's
    ``GlobalSecondaryIndexName`` together (the table's own under ``TableName`` alone).
    """
    dimensions = {"TableName": watch.table.table_name}
    if watch.index_name is not None:
        dimensions["GlobalSecondaryIndexName"] = watch.index_name
    return cw.Metric(namespace="AWS/DynamoDB", metric_name=f"{kind}ThrottleEvents",
                     dimensions_map=dimensions, statistic="Sum", period=MINUTE, label=label)
