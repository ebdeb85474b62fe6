"""What becomes of a received nudge message on SQS, once its claim is decided.

``worker.claimer`` decides (claimed or a definitive no: delete; not yet: show it again in a
while; no room here: hand it on to another worker now); this module does it, in batch calls,
and reads what a message says about itself (its hops, when it was sent, its receives).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from holdfast.core.aws import call
from holdfast.core.exceptions import HoldfastError
from holdfast.core.nudge import parse_nudge, trace_attributes, traceparent_of
from holdfast.worker.logs import WORKER_LOGGER

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["change_visibility", "copy_of", "hand_on", "hops", "receives", "sent_ms", "settle"]

logger = Logger(service=WORKER_LOGGER, child=True)


def settle(sqs: SQSClient, queue_url: str, delete: list[dict[str, Any]],
           again: list[tuple[dict[str, Any], int]],
           hand: list[dict[str, Any]] | None = None) -> None:
    """Hand ``hand`` on, delete ``delete``, show ``again`` again after its seconds."""
    if hand:
        try:
            hand_on(sqs, queue_url, hand)
        except HoldfastError as exc:  # back after the visibility timeout: nothing lost
            logger.warning("cannot hand nudges on", error=str(exc)[:300])
    try:
        if delete:
            call("DeleteMessageBatch", sqs.delete_message_batch,
                 QueueUrl=queue_url, Entries=[
                     {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                     for i, m in enumerate(delete)])
        change_visibility(sqs, queue_url, again)
    except HoldfastError as exc:
        # The messages come back after the visibility timeout: nothing is lost.
        logger.warning("cannot settle nudges", error=str(exc)[:300])


def hand_on(sqs: SQSClient, queue_url: str, messages: list[dict[str, Any]]) -> None:
    """Give nudges to the other workers now: send fresh copies, then delete ours.

    Making them visible again (visibility 0) would do on SQS, but a long poll already in
    flight elsewhere is only woken by a send on some implementations (moto), which cost a
    graceful handover about a second. A failed send (the call, or one entry of it) falls
    back to visibility 0 for that message, whose original is kept; a failed delete leaves a
    duplicate nudge, which costs one refused acquire.
    """
    try:
        resp = call("SendMessageBatch", sqs.send_message_batch, QueueUrl=queue_url,
                    Entries=[copy_of(i, m) for i, m in enumerate(messages)])
    except HoldfastError:
        change_visibility(sqs, queue_url, [(m, 0) for m in messages])
        return
    failed = {int(f["Id"]) for f in resp.get("Failed", [])}
    if failed:
        logger.warning("cannot hand some nudges on: shown again instead", failed=len(failed),
                       error=str(resp["Failed"][0].get("Message", ""))[:200])
    settle(sqs, queue_url, [m for i, m in enumerate(messages) if i not in failed],
           [(m, 0) for i, m in enumerate(messages) if i in failed])


def change_visibility(sqs: SQSClient, queue_url: str,
                      again: list[tuple[dict[str, Any], int]]) -> None:
    """Show each message of ``again`` again after its seconds."""
    if again:
        call("ChangeMessageVisibilityBatch", sqs.change_message_visibility_batch,
             QueueUrl=queue_url, Entries=[
                 {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"],
                  "VisibilityTimeout": seconds} for i, (m, seconds) in enumerate(again)])


def hops(message: dict[str, Any]) -> int:
    """How often ``message``'s nudge was handed on already (0 for anything else)."""
    try:
        return parse_nudge(str(message.get("Body", ""))).hops
    except ValueError:
        return 0


def copy_of(i: int, message: dict[str, Any]) -> dict[str, Any]:
    """A fresh send of ``message`` with its hop count + 1 (anything that is not a nudge goes
    as it came); its trace context goes with it (tracing on)."""
    body = str(message.get("Body", ""))
    with contextlib.suppress(ValueError):
        body = parse_nudge(body).handed_on().body()
    entry: dict[str, Any] = {"Id": str(i), "MessageBody": body}
    attributes = trace_attributes(traceparent_of(message))
    if attributes:
        entry["MessageAttributes"] = attributes
    return entry


def sent_ms(message: dict[str, Any]) -> int | None:
    """When SQS says ``message`` was sent (epoch ms; None if it does not say)."""
    try:
        return int(message.get("Attributes", {})["SentTimestamp"])
    except (KeyError, TypeError, ValueError):
        return None


def receives(message: dict[str, Any]) -> int:
    """How often SQS has delivered ``message`` (1 if it does not say)."""
    try:
        return max(1, int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1)))
    except (TypeError, ValueError):
        return 1
