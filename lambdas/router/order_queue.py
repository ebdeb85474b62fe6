"""The fast path of a stop order: one SQS message on the owner's own order queue.

The queue's URL is derived from the nudge queue's URL, the stack's prefix and the owner
(``holdfast.core.orders.order_queue_url``), so no lookup is needed. The durable path (the
order in the session item, read with the next heartbeat) always follows, so nothing here
fails a record: a queue that does not exist (the worker has none yet, or it is gone with its
session) is counted and logged at info, any other error logged at error and counted.
``send_body`` is the one send, also used for the sweeper's rebalancing directives and by
``holdfast drain``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.liveness import session_owner
from holdfast.core.orders import Order, order_queue_url
from lambdas.router.decide import Decision, Outcome

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from mypy_boto3_sqs import SQSClient

__all__ = ["MISSING_QUEUE_CODES", "queue_orders", "send_body", "send_order"]

# The Query protocol's code, and the JSON protocol's (newer botocore speaks JSON to SQS).
MISSING_QUEUE_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue",
                                 "QueueDoesNotExist"})


def send_order(sqs: SQSClient, nudge_queue_url: str, prefix: str, owner: str,
               order: Order) -> tuple[str, str]:
    """Send ``order`` to ``owner``'s queue; (counter key, detail), never raises for SQS."""
    return send_body(sqs, nudge_queue_url, prefix, owner, order.body(owner))


def send_body(sqs: SQSClient, nudge_queue_url: str, prefix: str, owner: str,
              body: str) -> tuple[str, str]:
    """Send one message ``body`` to ``owner``'s order queue (a stop order, a directive).

    Returns (counter key, detail): ``order_queue_sent``, ``order_queue_missing`` (no such
    queue: the caller logs it at info) or ``order_queue_failed``; never raises for SQS.
    """
    try:
        url = order_queue_url(nudge_queue_url, prefix, owner)
        sqs.send_message(QueueUrl=url, MessageBody=body)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in MISSING_QUEUE_CODES:
            return "order_queue_missing", code
        return "order_queue_failed", f"{code}: {exc}"[:300]
    except (BotoCoreError, ValueError) as exc:
        return "order_queue_failed", f"{type(exc).__name__}: {exc}"[:300]
    return "order_queue_sent", ""


def queue_orders(decisions: Mapping[str, Decision], sqs: SQSClient, nudge_queue_url: str,
                 prefix: str, logger: Logger) -> Counter[str]:
    """Send each ORDER decision of a batch to its owner's order queue; counts by result."""
    counts: Counter[str] = Counter()
    sent: set[tuple[str, str]] = set()
    for decision in decisions.values():
        conn_id, owner = decision.conn_id, decision.owner
        if decision.outcome is not Outcome.ORDER or conn_id is None or owner is None:
            continue
        order = decision.order()
        # Only sessions have order queues (a plain owner has none); one send per order.
        if order is None or session_owner(owner) is None or (owner, order.encode()) in sent:
            continue
        sent.add((owner, order.encode()))
        result, detail = send_order(sqs, nudge_queue_url, prefix, owner, order)
        counts[result] += 1
        if result == "order_queue_failed":
            logger.error("order not queued", conn_id=conn_id, owner=owner, detail=detail,
                         verb=order.verb)
        else:
            logger.info("order queued" if result == "order_queue_sent" else
                        "order not queued: no order queue", conn_id=conn_id, owner=owner,
                        detail=detail, verb=order.verb)
    return counts
