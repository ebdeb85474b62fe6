"""The outbox on moto SQS: messages for other workers' order queues, batched per recipient."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from holdfast.core.bundles import Letter, unbundle
from holdfast.core.nudge import REASON_HANDOFF, Nudge
from holdfast.core.orders import order_queue_name
from holdfast.worker.outbox import Outbox


def _drain(sqs: Any, url: str, owner: str) -> list[str]:
    """The messages in ``url`` (bundles unpacked), and how many SQS messages held them."""
    bodies: list[str] = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return bodies
        bodies += [b for m in got for b in unbundle(m["Body"], owner)]


async def test_one_turn_of_posts_goes_as_one_bundle_per_recipient(
        sqs: Any, unique_id: str) -> None:
    """25 messages for one worker and 3 for another, posted in one turn: one SQS message and
    one call each; every message in its recipient's order queue."""
    prefix, a, b = f"{unique_id}-o-", "wa#abc123", "wb#abc123"
    urls = {w: sqs.create_queue(QueueName=order_queue_name(prefix, w))["QueueUrl"]
            for w in (a, b)}
    nudge_url = urls[a].rsplit("/", 1)[0] + "/nudges"
    outbox = Outbox(sqs=sqs, queue_url=nudge_url, prefix=prefix)
    for i in range(25):
        outbox.post(a, Letter(f'{{"n": {i}}}'))
    for i in range(3):
        outbox.post(b, Nudge(f"c{i}", REASON_HANDOFF, to=b))
    await outbox.drain()
    assert outbox.calls == 2
    assert sorted(json.loads(x)["n"] for x in _drain(sqs, urls[a], a)) == list(range(25))
    assert sorted(json.loads(x)["conn_id"] for x in _drain(sqs, urls[b], b)) == [
        "c0", "c1", "c2"]


async def test_a_recipient_without_a_queue_costs_only_its_messages(
        sqs: Any, unique_id: str) -> None:
    """A recipient whose queue is gone, or whose name is no owner: logged, never raised; the
    other recipient's messages go all the same, and a later post is sent too."""
    prefix, a = f"{unique_id}-o-", "wa#abc123"
    url = sqs.create_queue(QueueName=order_queue_name(prefix, a))["QueueUrl"]
    outbox = Outbox(sqs=sqs, queue_url=url.rsplit("/", 1)[0] + "/nudges", prefix=prefix)
    outbox.post("gone#abc123", Letter("{}"))
    outbox.post("not an owner", Letter("{}"))
    outbox.post(a, Letter('{"n": 1}'))
    await outbox.drain()
    await asyncio.sleep(0)
    outbox.post(a, Letter('{"n": 2}'))
    await outbox.drain()
    assert sorted(json.loads(x)["n"] for x in _drain(sqs, url, a)) == [1, 2]
