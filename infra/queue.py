"""The nudge queue and its dead-letter queue, plus a queue for failed stream batches."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from holdfast.core import schema

__all__ = ["NudgeQueues", "secure_queue"]

# Parked messages wait for an operator: keep them as long as SQS allows.
_PARKED_RETENTION = Duration.days(14)
# A nudge older than a day is stale (the sweeper re-finds any lease still unowned), so an
# outage does not leave a flood of pointless nudges behind.
_NUDGE_RETENTION = Duration.days(1)



def secure_queue(scope: Construct, queue_id: str, retention: Duration,
                 removal_policy: RemovalPolicy, *,
                 dead_letters: sqs.IQueue | None = None) -> sqs.Queue:
    """An SQS queue as every fleet queue is: SQS-managed encryption, TLS only, the fleet's
    visibility timeout; with ``dead_letters``, moved there after ``DLQ_MAX_RECEIVE_COUNT``."""
    return sqs.Queue(
        scope, queue_id, encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
        removal_policy=removal_policy, retention_period=retention,
        visibility_timeout=Duration.seconds(schema.QUEUE_VISIBILITY_TIMEOUT_S),
        dead_letter_queue=None if dead_letters is None else sqs.DeadLetterQueue(
            queue=dead_letters, max_receive_count=schema.DLQ_MAX_RECEIVE_COUNT))

class NudgeQueues(Construct):
    """``queue``: nudges to claim a lease; ``dlq``: nudges no worker could act on;
    ``router_failures``: stream batches the router failed on after every retry.

    All three use SQS-managed encryption and refuse non-TLS requests; once the fleet's roles
    exist, :meth:`only_senders` keeps everyone else from sending nudges.
    """

    def __init__(self, scope: Construct, construct_id: str, *,
                 removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, construct_id)

        self.dlq = secure_queue(self, "DeadLetters", _PARKED_RETENTION, removal_policy)
        self.queue = secure_queue(self, "Nudges", _NUDGE_RETENTION, removal_policy,
                                  dead_letters=self.dlq)
        # The event source mapping's on-failure destination: it receives a description of the
        # stream records (shard, sequence numbers), not nudges, so it is not the nudge DLQ.
        self.router_failures = secure_queue(self, "RouterFailures", _PARKED_RETENTION,
                                            removal_policy)

    def only_senders(self, roles: Sequence[iam.IRole]) -> None:
        """Deny ``sqs:SendMessage`` on the nudge queue to every principal but ``roles``.

        A forged nudge is trusted for little (the acquire decides who holds a stream), but not
        nothing: a fresh "inserted" nudge's URL is dialled before the acquire (within the URL
        policy) and its first frame's seq may become a new stream's first checkpoint; and a
        flood of nudges would hide real work and scale the fleet out. Nobody else needs to
        send: a nudge older than a day is stale and the sweeper re-finds any lease still
        unowned, so parked nudges are never redriven.
        (``aws:PrincipalArn`` of a role session is the role's ARN.)
        """
        self.queue.add_to_resource_policy(iam.PolicyStatement(
            sid="OnlyTheFleetSendsNudges", effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()], actions=["sqs:SendMessage"],
            resources=[self.queue.queue_arn],
            conditions={"ArnNotEquals": {"aws:PrincipalArn": [r.role_arn for r in roles]}}))
