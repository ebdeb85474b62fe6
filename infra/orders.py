"""IAM for the per-session order queues (``holdfast.core.orders``), one place for every role.

The queues come and go with worker sessions, so they cannot be named one by one: every grant
is on ``<prefix>*`` in this account and region, the prefix being the stack's own
(``HoldfastStack.orders_queue_prefix``). Who may do what:

- a worker: create its session's queue, read and delete its messages, delete the queue;
- the router: send an order;
- the sweeper: send a rebalancing directive (``holdfast.core.directives``), and delete a
  queue no live session reads (and list the prefix, which SQS only allows on ``*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from holdfast.core.orders import validate_prefix

__all__ = ["ROUTER_ORDER_ACTIONS", "SWEEPER_ORDER_ACTIONS", "WORKER_ORDER_ACTIONS",
           "list_queues_statement", "order_queue_statement", "order_queues_arn"]

# SendMessage: a make-before-break handoff's messages go to the other worker's order queue.
WORKER_ORDER_ACTIONS: Final = ("sqs:CreateQueue", "sqs:ReceiveMessage", "sqs:DeleteMessage",
                               "sqs:DeleteQueue", "sqs:SendMessage")
ROUTER_ORDER_ACTIONS: Final = ("sqs:SendMessage",)
# SendMessage: directives, and nudges for a dead worker's streams; DeleteQueue: collection.
SWEEPER_ORDER_ACTIONS: Final = ("sqs:SendMessage", "sqs:DeleteQueue")


def order_queues_arn(scope: Construct, prefix: str) -> str:
    """``arn:<partition>:sqs:<region>:<account>:<prefix>*`` of ``scope``'s stack."""
    return Stack.of(scope).format_arn(service="sqs", resource=f"{validate_prefix(prefix)}*",
                                      arn_format=ArnFormat.NO_RESOURCE_NAME)


def order_queue_statement(scope: Construct, prefix: str,
                          actions: Sequence[str]) -> iam.PolicyStatement:
    """``actions`` on this fleet's order queues only."""
    return iam.PolicyStatement(actions=list(actions),
                               resources=[order_queues_arn(scope, prefix)])


def list_queues_statement() -> iam.PolicyStatement:
    """``sqs:ListQueues``: it takes a name prefix as a parameter, not as a resource."""
    return iam.PolicyStatement(actions=["sqs:ListQueues"], resources=["*"])
