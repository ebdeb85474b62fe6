"""The outbox on moto SQS: messages for other workers' order queues, batched per recipient."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from holdfast.core.bundles import Letter, unbundle
from holdfast.core.nudge import REASON_HANDOFF, Nudge
from holdfast.core.orders import order_queue_name
from holdfast.worker.outbox import FLUSHES_IN_FLIGHT, Outbox


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


class _HeldSends:
    """The SQS client, but a send to ``held_url`` waits until ``release`` is set."""

    def __init__(self, sqs: Any, held_url: str) -> None:
        self.sqs, self.held_url, self.release = sqs, held_url, threading.Event()

    def send_message_batch(self, **kwargs: Any) -> Any:
        if kwargs["QueueUrl"] == self.held_url:
            self.release.wait(10)
        return self.sqs.send_message_batch(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sqs, name)


A, B = "wa#abc123", "wb#abc123"


def _held_outbox(sqs: Any, unique_id: str) -> tuple[dict[str, str], _HeldSends, Outbox]:
    """Order queues for A and B, and an outbox whose sends to A wait for ``release``."""
    prefix = f"{unique_id}-o-"
    urls = {w: sqs.create_queue(QueueName=order_queue_name(prefix, w))["QueueUrl"]
            for w in (A, B)}
    slow = _HeldSends(sqs, urls[A])
    outbox = Outbox(sqs=slow, queue_url=urls[A].rsplit("/", 1)[0] + "/nudges",  # type: ignore[arg-type]
                    prefix=prefix)
    return urls, slow, outbox


async def test_a_post_does_not_wait_for_a_send_already_out(sqs: Any, unique_id: str) -> None:
    """A message posted while an earlier turn's send is still out goes at once, not after it
    (a TAKE behind another worker's bundle waited for that call)."""
    a, b = A, B
    urls, slow, outbox = _held_outbox(sqs, unique_id)
    outbox.post(a, Letter('{"n": 1}'))
    await asyncio.sleep(0.05)  # a's send is out, held
    outbox.post(b, Letter('{"n": 2}'))
    try:
        for _ in range(100):
            if outbox.calls:
                break
            await asyncio.sleep(0.02)
        assert [json.loads(x)["n"] for x in _drain(sqs, urls[b], b)] == [2]
    finally:
        slow.release.set()
    await outbox.drain()
    assert [json.loads(x)["n"] for x in _drain(sqs, urls[a], a)] == [1]


async def test_posts_beyond_the_sends_in_flight_go_together_when_one_ends(
        sqs: Any, unique_id: str) -> None:
    """With FLUSHES_IN_FLIGHT sends out, later posts wait and then go as one call."""
    a, b = A, B
    urls, slow, outbox = _held_outbox(sqs, unique_id)
    for i in range(FLUSHES_IN_FLIGHT):
        outbox.post(a, Letter(f'{{"n": {i}}}'))
        await asyncio.sleep(0.02)
    for i in range(3):
        outbox.post(b, Letter(f'{{"n": {i}}}'))
        await asyncio.sleep(0.02)
    assert outbox.calls == 0
    slow.release.set()
    await outbox.drain()
    assert outbox.calls == FLUSHES_IN_FLIGHT + 1
    assert sorted(json.loads(x)["n"] for x in _drain(sqs, urls[b], b)) == [0, 1, 2]
