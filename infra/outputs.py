"""A fleet's CloudFormation outputs: the names an operator reads back (tables, queues, log
groups, the dashboard), the same for our stack and for a user's stack holding the construct.

Apart from ``HoldfastFleet``, which builds the resources: outputs belong to a stack, so the
fleet adds them only when asked (``fleet.add_outputs()``), with a prefix for a second fleet
in the same stack (output ids are the stack's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import CfnOutput, Stack

if TYPE_CHECKING:
    from holdfast.infra.fleet import HoldfastFleet

__all__ = ["add_outputs", "fleet_outputs"]


def fleet_outputs(f: HoldfastFleet) -> list[tuple[str, str, str]]:
    """(output id, value, description) of every output ``f`` offers."""
    out = [
        ("TableName", f.leases.table.table_name, "Lease table (insert items here)"),
        ("SessionTableName", f.sessions.table.table_name,
         "Session table (one item per worker: liveness and stop orders)"),
        ("QueueUrl", f.queues.queue.queue_url, "Nudge queue"),
        ("DeadLetterQueueUrl", f.queues.dlq.queue_url, "Nudges parked for an operator"),
        ("ClusterName", f.workers.cluster.cluster_name, "ECS cluster of the workers"),
        ("ServiceName", f.workers.service.service_name, "ECS service of the workers"),
        ("DashboardUrl", f.monitoring.dashboard_url, "CloudWatch dashboard"),
        ("AlarmTopicArn", f.monitoring.topic.topic_arn, "SNS topic of every alarm"),
        ("WorkerLogGroup", f.workers.log_group.log_group_name, "Worker logs"),
        ("RouterLogGroup", f.router.handler.log_group.log_group_name, "Router logs"),
        ("SweeperLogGroup", f.sweeper.handler.log_group.log_group_name, "Sweeper logs"),
        ("TaskStoppedLogGroup", f.task_stopped.handler.log_group.log_group_name,
         "Task-stopped function logs (stopped tasks reported by ECS)"),
        ("RouterFailuresQueueUrl", f.queues.router_failures.queue_url,
         "Stream records the router gave up on after every retry"),
    ]
    if f.handler_failures is not None:
        out.append(("HandlerFailuresQueueUrl", f.handler_failures.queue.queue_url,
                    "Messages whose handler calls all failed (policy skip)"))
    return out


def add_outputs(f: HoldfastFleet, *, prefix: str = "") -> list[CfnOutput]:
    """Add ``f``'s outputs to its stack, each id after ``prefix``."""
    stack = Stack.of(f)
    return [CfnOutput(stack, f"{prefix}{output_id}", value=value, description=description)
            for output_id, value, description in fleet_outputs(f)]
