"""Platform-reported death: ECS says a worker task STOPPED -> its session is declared dead now.

An EventBridge rule matches the fleet service's "ECS Task State Change" events whose
``lastStatus`` is STOPPED and invokes ``lambdas.taskstopped``: a stopped task's containers are
gone, so its session is declared dead without waiting out the TTL and its streams released
(the router then nudges them). Failed deliveries and failed invocations are retried and then
parked in a queue of their own; a lost report only costs the TTL path (the sweeper).
"""

from __future__ import annotations

from collections.abc import Mapping

import jsii
from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from holdfast.core import schema, unowned
from holdfast.core.schema import ATTR, SESSION
from holdfast.core.sessions import REPORT_READS
from holdfast.infra.function import FunctionDefaults, HoldfastFunction, lease_environment
from holdfast.infra.nag import acknowledge
from holdfast.lambdas.taskstopped import events as task_events
from holdfast.lambdas.taskstopped.limits import FUNCTION_TIMEOUT_S

__all__ = ["TASKSTOPPED_HANDLER", "TASKSTOPPED_LEASE_ATTRIBUTES",
           "TASKSTOPPED_SESSION_READS", "TASKSTOPPED_SESSION_WRITES", "TaskStopped"]

TASKSTOPPED_HANDLER = "holdfast.lambdas.taskstopped.handler.lambda_handler"
# What report_dead reads of a session item (a projected GetItem).
TASKSTOPPED_SESSION_READS = tuple(REPORT_READS)
# Its session writes: the DEAD declaration (state, when, why; conditional on the incarnation,
# and on no heartbeat after the stop nor a start after it, read by the condition alone) and the
# reaped mark (when, TTL). It can never start, renew (the expiry) or order a session.
TASKSTOPPED_SESSION_WRITES = (schema.PARTITION_KEY, SESSION.state, SESSION.ended_at_ms,
                              SESSION.end_reason, SESSION.incarnation, SESSION.heartbeat_at_ms,
                              SESSION.started_at_ms, SESSION.reaped_at_ms, SESSION.ttl)
# Its lease writes: the conditional release of a dead owner's stream (expiry 0, status, owner
# removed, the unowned-time marker); never the URL, epoch, checkpoint or desired state.
TASKSTOPPED_LEASE_ATTRIBUTES = (schema.PARTITION_KEY, ATTR.lease_expires_at_ms, ATTR.status,
                                ATTR.updated_at_ms, ATTR.last_error, ATTR.lease_owner,
                                *dict.fromkeys(unowned.MARK_NAMES.values()))
_RETRIES = 2  # delivery by EventBridge, and again for a failed invocation
_MAX_AGE = Duration.hours(1)  # an older report is moot: the TTL path has freed the streams
_PARKED_RETENTION = Duration.days(14)


def _pinned(actions: list[str], arn: str, attributes: tuple[str, ...],
            key_prefix: str) -> iam.PolicyStatement:
    """``actions`` on ``arn`` naming only ``attributes``, no values returned, keys by prefix."""
    return iam.PolicyStatement(
        actions=actions, resources=[arn],
        conditions={
            "ForAllValues:StringEquals": {"dynamodb:Attributes": list(attributes)},
            "StringEqualsIfExists": {"dynamodb:ReturnValues": "NONE"},
            "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{key_prefix}*"]},
        })


@jsii.implements(lambda_.IDestination)
class _SendOnly:
    """An on-failure destination that grants ``sqs:SendMessage`` only (``SqsDestination``
    also grants GetQueueAttributes and GetQueueUrl, which Lambda does not need)."""

    def __init__(self, queue: sqs.IQueue) -> None:
        self._queue = queue

    def bind(self, scope: Construct, fn: lambda_.IFunction, *,
             type: lambda_.DestinationType) -> lambda_.DestinationConfig:
        """Grant the function's role SendMessage on the queue; return its ARN."""
        fn.add_to_role_policy(iam.PolicyStatement(actions=["sqs:SendMessage"],
                                                  resources=[self._queue.queue_arn]))
        return lambda_.DestinationConfig(destination=self._queue.queue_arn)


class TaskStopped(Construct):
    """The rule on the worker service's stopped tasks, the function and its failure queue."""

    def __init__(self, scope: Construct, construct_id: str, *, defaults: FunctionDefaults,
                 cluster: ecs.ICluster, service: ecs.BaseService, table: dynamodb.ITable,
                 owner_index_arn: str, session_table: dynamodb.ITable, queue: sqs.IQueue,
                 service_name: str, timing: Mapping[str, str],
                 removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, construct_id)
        self.handler = HoldfastFunction(
            self, "Handler", defaults=defaults, handler=TASKSTOPPED_HANDLER,
            description="Holdfast taskstopped: a stopped worker task -> its session dead now",
            environment=lease_environment(
                table_name=table.table_name, session_table_name=session_table.table_name,
                queue_url=queue.queue_url, timing=timing, service_name=service_name),
            timeout=Duration.seconds(FUNCTION_TIMEOUT_S), memory_mib=256)
        self.function = self.handler.function
        role = self.handler.role
        role.add_to_policy(_pinned(["dynamodb:GetItem"], session_table.table_arn,
                                   TASKSTOPPED_SESSION_READS, schema.SESSION_PREFIX))
        role.add_to_policy(_pinned(["dynamodb:UpdateItem"], session_table.table_arn,
                                   TASKSTOPPED_SESSION_WRITES, schema.SESSION_PREFIX))
        role.add_to_policy(iam.PolicyStatement(actions=["dynamodb:Query"],
                                               resources=[owner_index_arn]))
        role.add_to_policy(_pinned(["dynamodb:UpdateItem"], table.table_arn,
                                   TASKSTOPPED_LEASE_ATTRIBUTES, schema.PK_PREFIX))
        # A second nudge per released stream (the dead worker's last polls may eat the first).
        role.add_to_policy(iam.PolicyStatement(actions=["sqs:SendMessage"],
                                               resources=[queue.queue_arn]))
        if defaults.tracing:
            acknowledge(role.node.find_child("DefaultPolicy"), "IAM5[Resource::*]",
                        "xray:PutTraceSegments and xray:PutTelemetryRecords (active tracing) "
                        "support no resource-level permissions, so their resource must be '*'. "
                        "Every DynamoDB and SQS statement names its table, index or queue.")
        self.failures = sqs.Queue(
            self, "Failures", encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
            removal_policy=removal_policy, retention_period=_PARKED_RETENTION)
        acknowledge(self.failures, "SQS3",
                    "This queue is itself a dead-letter destination: stopped-task events that "
                    "EventBridge could not deliver, or whose invocation failed after every "
                    "retry, are parked here. A lost report only means the session's TTL frees "
                    "its streams, as for a hung worker.")
        # Lambda's own retries of a failed (asynchronous) invocation, then the same queue.
        self.function.configure_async_invoke(max_event_age=_MAX_AGE, retry_attempts=_RETRIES,
                                             on_failure=_SendOnly(self.failures))
        self.rule = events.Rule(
            self, "Rule", description="A Holdfast worker task stopped: declare its session dead",
            event_pattern=events.EventPattern(
                source=[task_events.SOURCE], detail_type=[task_events.DETAIL_TYPE],
                detail={"lastStatus": [task_events.STOPPED], "clusterArn": [cluster.cluster_arn],
                        "group": [f"service:{service.service_name}"]}),
            targets=[targets.LambdaFunction(self.function, retry_attempts=_RETRIES,
                                            max_event_age=_MAX_AGE,
                                            dead_letter_queue=self.failures)])
