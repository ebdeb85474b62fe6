"""The sweeper: every minute, a Lambda that sweeps the index for expired leases about once a second.

A killed worker writes nothing, so its leases only show up by time passing: the sweeper finds
them through the KEYS_ONLY index and nudges them like the router does. One invocation per minute
loops over ~1 s sweeps, which is far cheaper than one invocation per second.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.function import FunctionDefaults, HoldfastFunction, lease_environment

__all__ = ["SWEEPER_HANDLER", "SWEEPER_TIMEOUT", "Sweeper"]

SWEEPER_HANDLER = "lambdas.sweeper.handler.lambda_handler"
# The handler sweeps until the minute is nearly over; ten seconds of slack covers a last
# query and the metrics flush without overlapping the next scheduled run by much.
SWEEPER_TIMEOUT = Duration.seconds(70)


class Sweeper(Construct):
    """The sweeper function and its one-minute schedule. May only query the index and send."""

    def __init__(self, scope: Construct, construct_id: str, *, defaults: FunctionDefaults,
                 table: dynamodb.ITable, index_arn: str, queue: sqs.IQueue, service_name: str,
                 lease_ms: int, skew_ms: int, reserve_concurrency: bool) -> None:
        super().__init__(scope, construct_id)
        self.handler = HoldfastFunction(
            self, "Handler", defaults=defaults, handler=SWEEPER_HANDLER,
            description="Holdfast sweeper: expired leases -> claim nudges",
            environment=lease_environment(
                table_name=table.table_name, queue_url=queue.queue_url, lease_ms=lease_ms,
                skew_ms=skew_ms, service_name=service_name),
            timeout=SWEEPER_TIMEOUT, memory_mib=256,
            # One sweeper at a time: overlapping sweeps would only send duplicate nudges.
            # Accounts whose concurrency quota is still 10 cannot reserve any; they turn it off.
            reserved_concurrency=1 if reserve_concurrency else None)
        self.function = self.handler.function
        role = self.handler.role
        role.add_to_policy(iam.PolicyStatement(actions=["dynamodb:Query"],
                                               resources=[index_arn]))
        role.add_to_policy(iam.PolicyStatement(actions=["sqs:SendMessage"],
                                               resources=[queue.queue_arn]))
        # A missed or failed minute is simply followed by the next: no retries, and an event
        # throttled behind a still-running sweep is dropped once the next one is due.
        self.function.configure_async_invoke(max_event_age=Duration.seconds(60),
                                             retry_attempts=0)
        self.schedule = events.Rule(
            self, "Schedule", schedule=events.Schedule.rate(Duration.minutes(1)),
            description="Start a Holdfast sweep loop every minute",
            targets=[targets.LambdaFunction(self.function, retry_attempts=0,
                                            max_event_age=Duration.seconds(60))])
