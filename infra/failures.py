"""The handler's on-failure destination: an SQS queue, its DLQ, and who may send to it.

With ``HOLDFAST_HANDLER_ON_FAILURE=skip`` a worker sends each message whose handler calls all
failed to this queue (one JSON body per message: ``holdfast.core.names.FAILURE_FIELDS``) and
moves its checkpoint past the message only once SQS accepted it, like a Lambda event source
mapping's on-failure destination. What reads it is the user's (a redrive tool, an operator);
a body that reader keeps failing on moves to the DLQ instead of circling forever.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from constructs import Construct

from holdfast.core import names
from holdfast.infra.queue import secure_queue

__all__ = ["HandlerFailures"]

# Failed messages wait for an operator or a redrive tool: keep them as long as SQS allows.
_RETENTION = Duration.days(14)


class HandlerFailures(Construct):
    """``queue``: messages the handler gave up on (the worker's ``HOLDFAST_FAILURE_QUEUE_URL``);
    ``dlq``: those its reader failed on ``DLQ_MAX_RECEIVE_COUNT`` times.

    Both use SQS-managed encryption and refuse non-TLS requests, as the nudge queues do
    (``holdfast.infra.queue``); :meth:`grant_send` lets the worker's task role send.
    """

    def __init__(self, scope: Construct, construct_id: str, *,
                 removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, construct_id)

        self.dlq = secure_queue(self, "HandlerFailuresDeadLetters", _RETENTION, removal_policy)
        self.queue = secure_queue(self, "HandlerFailures", _RETENTION, removal_policy,
                                  dead_letters=self.dlq)

    def grant_send(self, role: iam.IGrantable) -> iam.Grant:
        """Let ``role`` (the worker's task role) send to the queue, and nothing else on it:
        ``grant_send_messages`` would add GetQueueAttributes and GetQueueUrl, which the
        worker never calls (it is given the URL)."""
        return iam.Grant.add_to_principal(grantee=role, actions=["sqs:SendMessage"],
                                          resource_arns=[self.queue.queue_arn])

    def worker_environment(self) -> dict[str, str]:
        """What the worker container needs to skip to this queue."""
        return {names.ENV_HANDLER_ON_FAILURE: names.HANDLER_ON_FAILURE_SKIP,
                names.ENV_FAILURE_QUEUE_URL: self.queue.queue_url}
