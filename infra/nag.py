"""cdk-nag acknowledgements: every AwsSolutions finding we accept, on the one construct that
raises it, with the reason we accept it.

cdk-nag 3 reports findings through the CDK's validation framework (a finding fails the synth);
an acknowledgement is ``Validations.of(construct).acknowledge(...)`` with the id the report
prints (``AwsSolutions::<rule>[<finding>]``). Anything not acknowledged here fails ``cdk synth``.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

from holdfast.infra.network import Network
from holdfast.infra.queue import NudgeQueues
from holdfast.infra.router import Router
from holdfast.infra.service import WorkerService
from holdfast.infra.sweeper import Sweeper

__all__ = ["PACK", "acknowledge", "acknowledge_findings"]

PACK = "AwsSolutions"
_WILDCARD_RESOURCE = "IAM5[Resource::*]"
_XRAY = ("xray:PutTraceSegments and xray:PutTelemetryRecords (active tracing) support no "
         "resource-level permissions, so their resource must be '*'")


_ORDER_QUEUES = ("those queues come and go with the sessions and so cannot be named in "
                 "advance; the wildcard is confined to this stack's own queue-name prefix in "
                 "this account and region")


def _order_queues(prefix: str) -> str:
    return f"IAM5[Resource::arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:{prefix}*]"


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge the AwsSolutions finding ``rule`` (e.g. ``ECS2``) on ``scope``."""
    Validations.of(scope).acknowledge(
        Acknowledgment(id=f"{PACK}::{PACK}-{rule}", reason=reason))


def acknowledge_findings(*, router: Router, sweeper: Sweeper, workers: WorkerService,
                         queues: NudgeQueues, network: Network, tracing: bool) -> None:
    """Acknowledge the findings this design accepts on purpose (see each reason)."""
    acknowledge(queues.router_failures, "SQS3",
                "This queue is itself a dead-letter destination: the router's event source "
                "mapping sends descriptions of stream batches it gave up on here. A DLQ behind "
                "it would only move the same records again; an alarm watches its depth.")
    acknowledge(router.handler.role.node.find_child("DefaultPolicy"), _WILDCARD_RESOURCE,
                "dynamodb:ListStreams (needed by the stream event source mapping) supports no "
                "resource-level permissions and only lists stream ARNs"
                + (f"; {_XRAY}" if tracing else "")
                + ". Every other statement names its table, stream or queue.")
    acknowledge(router.handler.role.node.find_child("DefaultPolicy"),
                _order_queues(router.orders_queue_prefix),
                "sqs:SendMessage only (no receive, delete or purge) to the per-worker-session "
                f"stop-order queues; {_ORDER_QUEUES}")
    acknowledge(workers.task_definition.task_role.node.find_child("DefaultPolicy"),
                _order_queues(router.orders_queue_prefix),
                "each worker session creates, long-polls and at a graceful stop deletes an "
                "order queue of its own, and sends a make-before-break handoff's messages to "
                f"another session's; {_ORDER_QUEUES}")
    acknowledge(sweeper.handler.role.node.find_child("DefaultPolicy"),
                _order_queues(router.orders_queue_prefix),
                "sqs:SendMessage of rebalancing directives, and of nudges for a dead worker's "
                "streams, to live sessions' order queues, and "
                "sqs:DeleteQueue of order queues that no live session reads (a crashed worker "
                f"could not delete its own); no receive or purge; {_ORDER_QUEUES}")
    acknowledge(sweeper.handler.role.node.find_child("DefaultPolicy"), _WILDCARD_RESOURCE,
                "sqs:ListQueues (finding this stack's order queues by name prefix) supports no "
                "resource-level permissions and only lists queue URLs"
                + (f"; {_XRAY}" if tracing else "")
                + ". Every DynamoDB statement names its tables and indexes.")
    if tracing:
        acknowledge(workers.task_definition.task_role.node.find_child("DefaultPolicy"),
                    _WILDCARD_RESOURCE,
                    f"{_XRAY} (the ADOT collector sidecar exports the workers' spans). Every "
                    "DynamoDB and SQS statement names its tables, indexes and queue.")
    execution_role = workers.task_definition.execution_role
    if execution_role is not None:
        acknowledge(execution_role.node.find_child("DefaultPolicy"), _WILDCARD_RESOURCE,
                    "ecr:GetAuthorizationToken supports no resource-level permissions; the "
                    "image pull actions are scoped to the CDK asset repository and log writes "
                    "to the worker log group.")
    acknowledge(workers.task_definition, "ECS2",
                "The container environment holds only non-secret configuration (table name, "
                "queue URL, lease timings, limits); the worker uses no secrets and gets AWS "
                "credentials from its task role.")
    if network.flow_logs_disabled:
        acknowledge(network, "VPC7",
                    "VPC flow logs were turned off with the context setting vpcFlowLogs=false "
                    "by the operator deploying this stack.")
