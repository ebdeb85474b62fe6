"""The router: a stream-triggered Lambda that turns "wanted but unowned" changes into nudges."""

from __future__ import annotations

from collections.abc import Mapping

import jsii
from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from holdfast.core import names, schema
from holdfast.core.filters import filter_criteria
from holdfast.core.orders import prefix_for, validate_prefix
from holdfast.infra.function import FunctionDefaults, HoldfastFunction, lease_environment
from holdfast.infra.orders import ROUTER_ORDER_ACTIONS, order_queue_statement
from holdfast.infra.settings import DEFAULT_FLEET_NAME
from holdfast.lambdas.router.deps import FUNCTION_TIMEOUT_S

__all__ = ["ROUTER_HANDLER", "ROUTER_SESSION_ATTRIBUTES", "Router",
           "SendOnlyDestination", "normalise_statement", "orders_queue_prefix",
           "stop_order_statement"]

ROUTER_HANDLER = "holdfast.lambdas.router.handler.lambda_handler"
# The session attributes a stop order may name: the key, the order set it ADDs to, and what
# its condition may read to address the holder's own incarnation while it is alive.
ROUTER_SESSION_ATTRIBUTES = (schema.PARTITION_KEY, schema.SESSION.orders,
                             schema.SESSION.incarnation, schema.SESSION.state)

def orders_queue_prefix(stack_name: str, fleet_name: str = DEFAULT_FLEET_NAME) -> str:
    """The start of every order queue's name of one fleet (``orders.prefix_for``): at most
    40 characters of ``[A-Za-z0-9_-]``, and deterministic, so a redeploy keeps the names the
    IAM grant, the workers and the sweeper agree on. A fleet named other than the default
    has its name in it: two fleets of one stack sharing a prefix would each have their
    sweeper delete the other's queues (they belong to no session of its own). The default
    fleet keeps the stack's alone (the names deployed fleets already use)."""
    return prefix_for(stack_name if fleet_name == DEFAULT_FLEET_NAME
                      else f"{stack_name}-{fleet_name}")


def normalise_statement(table_arn: str) -> iam.PolicyStatement:
    """The one write the router may make: ``LeaseStore.normalise`` (SET lease_expires_at_ms: 0,
    or a stream written over held for its holder's take-back, conditioned on no ``status``).

    IAM cannot say "only this update expression", but it can pin what the request touches:
    - ``dynamodb:Attributes`` (ForAllValues): only the key, the attributes the condition
      reads and the one it sets (IAM cannot tell a condition's from a write's: a router could
      set ``status``, which frees and claims nothing); an update naming any other attribute
      (owner, epoch, checkpoint) is denied, so a bug or a hijacked router cannot steal or
      corrupt a lease.
    - ``dynamodb:ReturnValues`` = NONE: the router never reads items back through a write.
    - ``dynamodb:LeadingKeys`` (ForAllValues, ``CONN#*``): only lease items.
    """
    return iam.PolicyStatement(
        actions=["dynamodb:UpdateItem"],
        resources=[table_arn],
        conditions={
            "ForAllValues:StringEquals": {"dynamodb:Attributes": [
                schema.PARTITION_KEY, schema.ATTR.desired_state, schema.ATTR.lease_expires_at_ms,
                schema.ATTR.status,
            ]},
            "StringEqualsIfExists": {"dynamodb:ReturnValues": "NONE"},
            "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{schema.PK_PREFIX}*"]},
        },
    )


def stop_order_statement(session_table_arn: str) -> iam.PolicyStatement:
    """The router's one session write: ``ADD orders`` on the holder's session item.

    Pinned like :func:`normalise_statement`: only :data:`ROUTER_SESSION_ATTRIBUTES`, no values
    returned, only ``WORKER#`` items. A hijacked router can queue stop orders, but can never
    mark a session dead, forge a heartbeat or end one.
    """
    return iam.PolicyStatement(
        actions=["dynamodb:UpdateItem"],
        resources=[session_table_arn],
        conditions={
            "ForAllValues:StringEquals": {"dynamodb:Attributes": list(ROUTER_SESSION_ATTRIBUTES)},
            "StringEqualsIfExists": {"dynamodb:ReturnValues": "NONE"},
            "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{schema.SESSION_PREFIX}*"]},
        },
    )


@jsii.implements(lambda_.IEventSourceDlq)
class SendOnlyDestination:
    """An on-failure SQS destination that grants ``sqs:SendMessage`` only.

    The stock ``SqsDlq`` also grants GetQueueAttributes and GetQueueUrl, which Lambda does not
    need to deliver a failure record.
    """

    def __init__(self, queue: sqs.IQueue) -> None:
        self._queue = queue

    def bind(self, target: lambda_.IEventSourceMapping,
             target_handler: lambda_.IFunction) -> lambda_.DlqDestinationConfig:
        """Grant the function's role SendMessage on the queue; return its ARN."""
        target_handler.add_to_role_policy(iam.PolicyStatement(
            actions=["sqs:SendMessage"], resources=[self._queue.queue_arn]))
        return lambda_.DlqDestinationConfig(destination=self._queue.queue_arn)


class Router(Construct):
    """The router function and its event source mapping on the lease table's stream.

    It nudges wanted-but-unowned streams and passes orders (stop, release) to the holder's
    order queue (``orders_queue_prefix``) and session item; it never frees an owned stream.
    Checkpoints never invoke it: the shared filter patterns drop every record that keeps an
    owner. A failing batch is bisected and retried a bounded number of times; what still fails
    is described in ``failures`` (shard and sequence numbers) for an operator, and the sweeper
    covers any lease it left unnudged.
    """

    def __init__(self, scope: Construct, construct_id: str, *, defaults: FunctionDefaults,
                 table: dynamodb.ITable, session_table: dynamodb.ITable, queue: sqs.IQueue,
                 failures: sqs.IQueue, service_name: str, timing: Mapping[str, str],
                 batch_size: int, batching_window_seconds: int, retry_attempts: int,
                 parallelization_factor: int, orders_queue_prefix: str) -> None:
        super().__init__(scope, construct_id)
        environment = lease_environment(
            table_name=table.table_name, session_table_name=session_table.table_name,
            queue_url=queue.queue_url, timing=timing, service_name=service_name)
        environment[names.ENV_ORDERS_QUEUE_PREFIX] = validate_prefix(orders_queue_prefix)
        self.orders_queue_prefix = orders_queue_prefix
        self.handler = HoldfastFunction(
            self, "Handler", defaults=defaults, handler=ROUTER_HANDLER,
            description="Holdfast router: lease stream -> claim nudges and stop orders",
            environment=environment,
            timeout=Duration.seconds(FUNCTION_TIMEOUT_S), memory_mib=256)
        self.function = self.handler.function
        role = self.handler.role
        # SendMessage also authorises SendMessageBatch; no GetQueueUrl/Attributes: the URL is
        # passed in the environment.
        role.add_to_policy(iam.PolicyStatement(actions=["sqs:SendMessage"],
                                               resources=[queue.queue_arn]))
        role.add_to_policy(normalise_statement(table.table_arn))
        role.add_to_policy(stop_order_statement(session_table.table_arn))
        role.add_to_policy(order_queue_statement(self, orders_queue_prefix,
                                                 ROUTER_ORDER_ACTIONS))
        self.function.add_event_source(sources.DynamoEventSource(
            table,
            # From the oldest record still in the stream: a re-created mapping must not skip
            # an INSERT, because an item without an expiry is invisible to the sweeper.
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=batch_size,
            max_batching_window=(Duration.seconds(batching_window_seconds)
                                 if batching_window_seconds else None),
            parallelization_factor=parallelization_factor,
            bisect_batch_on_error=True,
            retry_attempts=retry_attempts,
            report_batch_item_failures=True,
            on_failure=SendOnlyDestination(failures),
            # Verbatim from holdfast.core.filters: the runner and the property tests use the
            # same strings.
            filters=[{"pattern": f["Pattern"]} for f in filter_criteria()["Filters"]],
        ))
