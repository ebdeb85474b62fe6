"""The sweeper: every minute, a Lambda that sweeps for dead sessions and expired leases about
once a second.

A killed worker writes nothing, so its death only shows up by time passing: the sweeper scans
the session table for sessions silent past their expiry, marks them dead, releases their
streams (found through the owner index) and nudges them like the router does; the seed index
still finds any lease whose own expiry passed. One invocation per minute loops over ~1 s
sweeps, which is far cheaper than one invocation per second. It is also the fleet's one
rebalancing decider (``lambdas/sweeper/balancer.py``): from the same session scan it writes
targets into session items and sends them to the sessions' order queues.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from holdfast.core import names
from holdfast.core.schema import OWNER_INDEX_NAME
from holdfast.infra.function import FunctionDefaults, HoldfastFunction, lease_environment
from holdfast.infra.orders import (
    SWEEPER_ORDER_ACTIONS,
    list_queues_statement,
    order_queue_statement,
)
from holdfast.lambdas.settings import Settings

__all__ = ["BALANCE_ENVIRONMENT", "SWEEPER_HANDLER", "SWEEPER_LEASE_ACTIONS",
           "SWEEPER_SESSION_ACTIONS", "SWEEPER_TIMEOUT", "Sweeper"]

SWEEPER_HANDLER = "holdfast.lambdas.sweeper.handler.lambda_handler"
# The handler sweeps until the minute is nearly over; ten seconds of slack covers a last
# query and the metrics flush without overlapping the next scheduled run by much.
SWEEPER_TIMEOUT = Duration.seconds(70)
# Sessions: read them all, read one (the owner audit judges an owner the scan did not see
# alive), mark dead or reaped, write rebalancing targets. Never Put or Delete (TTL removes them).
SWEEPER_SESSION_ACTIONS = ("dynamodb:Scan", "dynamodb:GetItem", "dynamodb:UpdateItem")
# Leases: release a dead session's streams (PartiQL batches of conditional UPDATEs, a lone one
# or a refused statement by UpdateItem); the slow pass scans for items the sparse index cannot
# see and gives them an expiry.
SWEEPER_LEASE_ACTIONS = ("dynamodb:Scan", "dynamodb:UpdateItem", "dynamodb:PartiQLUpdate")

_BALANCE = Settings(table="-", queue_url="-")  # only for its defaults: one place for them
# Rebalancing, written out so the deployed values are visible in the function's configuration.
BALANCE_ENVIRONMENT = {
    names.ENV_BALANCE: "on" if _BALANCE.balance else "off",
    names.ENV_BALANCE_INTERVAL_MS: str(_BALANCE.balance_interval_ms),
    names.ENV_BALANCE_BAND: f"{_BALANCE.balance_band:g}",
    names.ENV_BALANCE_BAND_MIN: f"{_BALANCE.balance_band_min:g}",
    names.ENV_BALANCE_MOTION: f"{_BALANCE.balance_motion:g}",
    names.ENV_BALANCE_TARGET_TTL_MS: str(_BALANCE.balance_target_ttl_ms),
}


class Sweeper(Construct):
    """The sweeper function and its one-minute schedule.

    May scan and update sessions, query both lease indexes, release leases, send nudges, send
    directives to order queues and delete those without a live session; it never reads a
    lease item whole or creates anything.
    """

    def __init__(self, scope: Construct, construct_id: str, *, defaults: FunctionDefaults,
                 table: dynamodb.ITable, index_arns: Sequence[str],
                 session_table: dynamodb.ITable, queue: sqs.IQueue, service_name: str,
                 timing: Mapping[str, str], reserve_concurrency: bool,
                 orders_queue_prefix: str) -> None:
        super().__init__(scope, construct_id)
        self.handler = HoldfastFunction(
            self, "Handler", defaults=defaults, handler=SWEEPER_HANDLER,
            description="Holdfast sweeper: dead sessions and expired leases -> claim nudges",
            environment={**lease_environment(
                table_name=table.table_name, session_table_name=session_table.table_name,
                queue_url=queue.queue_url, timing=timing, service_name=service_name),
                names.ENV_ORDERS_QUEUE_PREFIX: orders_queue_prefix, **BALANCE_ENVIRONMENT},
            timeout=SWEEPER_TIMEOUT, memory_mib=256,
            # One sweeper at a time: overlapping sweeps would only send duplicate nudges.
            # Accounts whose concurrency quota is still 10 cannot reserve any; they turn it off.
            reserved_concurrency=1 if reserve_concurrency else None)
        self.function = self.handler.function
        role = self.handler.role
        role.add_to_policy(iam.PolicyStatement(actions=["dynamodb:Query"],
                                               resources=list(index_arns)))
        # The owner audit reads the owner index whole (keys only) to find streams whose owner
        # is not a live session (holdfast.core.liveness).
        role.add_to_policy(iam.PolicyStatement(
            actions=["dynamodb:Scan"],
            resources=[a for a in index_arns if a.endswith(f"/index/{OWNER_INDEX_NAME}")]))
        role.add_to_policy(iam.PolicyStatement(actions=list(SWEEPER_LEASE_ACTIONS),
                                               resources=[table.table_arn]))
        role.add_to_policy(iam.PolicyStatement(actions=list(SWEEPER_SESSION_ACTIONS),
                                               resources=[session_table.table_arn]))
        role.add_to_policy(iam.PolicyStatement(actions=["sqs:SendMessage"],
                                               resources=[queue.queue_arn]))
        # Rebalancing directives to a session's order queue (lambdas/sweeper/balancer.py), and
        # collecting order queues that no live session reads (lambdas/orderqueues.py).
        role.add_to_policy(order_queue_statement(self, orders_queue_prefix,
                                                 SWEEPER_ORDER_ACTIONS))
        role.add_to_policy(list_queues_statement())
        # A missed or failed minute is simply followed by the next: no retries, and an event
        # throttled behind a still-running sweep is dropped once the next one is due.
        self.function.configure_async_invoke(max_event_age=Duration.seconds(60),
                                             retry_attempts=0)
        self.schedule = events.Rule(
            self, "Schedule", schedule=events.Schedule.rate(Duration.minutes(1)),
            description="Start a Holdfast sweep loop every minute",
            targets=[targets.LambdaFunction(self.function, retry_attempts=0,
                                            max_event_age=Duration.seconds(60))])
