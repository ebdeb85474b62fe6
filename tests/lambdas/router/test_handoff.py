"""A release that names its successor: nudged on the successor's order queue at once, on the
shared queue only when the hold ends (moto SQS, DynamoDB Local sessions)."""

from __future__ import annotations

from typing import Any

from holdfast.core import rules
from holdfast.core.directives import parse_inbox_body
from holdfast.core.nudge import REASON_HANDOFF, Nudge, parse_nudge
from holdfast.core.orders import order_queue_name
from holdfast.core.schema import ATTR
from holdfast.core.store import wall_clock_ms
from holdfast.lambdas.router.decide import Outcome, Reason, decide
from holdfast.lambdas.router.deps import SEND_RESERVE_MS
from holdfast.lambdas.router.handler import route
from holdfast.localaws import LocalAws
from holdfast.runner.context import LocalContext
from tests.lambdas.records import event, image, record
from tests.lambdas.router.test_order_queue import PREFIX, deps_for

SUCCESSOR = "w-new#abc123"


def handoff_record(conn_id: str, now_ms: int, successor: str = SUCCESSOR) -> dict[str, Any]:
    """The holder's handoff release: owner gone, hold in the expiry, successor named."""
    return record("MODIFY", image(conn_id, owner="w-old#def456", expires=now_ms + 3_600_000,
                                  epoch=6, status="RUNNING"),
                  image(conn_id, expires=now_ms + rules.HANDOFF_HOLD_MS, epoch=6,
                        status="RELEASED", last_seq=40,
                        **{ATTR.successor: {"S": successor}}))


def test_decide_names_the_successor_and_delays_the_shared_nudge() -> None:
    """The decision is a "handoff" nudge for the successor, due on the shared queue once the
    hold (and the skew) is over."""
    now = 1_700_000_000_000
    rec = handoff_record("c1", now)["dynamodb"]
    d = decide("MODIFY", rec["OldImage"], rec["NewImage"], now, skew_ms=1_000)
    assert (d.outcome, d.reason, d.successor) == (Outcome.NUDGE, Reason.HANDOFF, SUCCESSOR)
    assert d.delay_s == -(-(rules.HANDOFF_HOLD_MS + 1_000) // 1000)


def test_a_plain_release_names_nobody() -> None:
    """Without a successor the release is nudged as before, to whoever has room, at once."""
    now = 1_700_000_000_000
    d = decide("MODIFY", image("c1", owner="w-old#def456", expires=now + 10_000, epoch=6),
               image("c1", expires=0, epoch=6, status="RELEASED"), now)
    assert (d.reason, d.successor, d.delay_s) == (Reason.RELEASED, None, 0)


def test_the_successor_is_told_on_its_order_queue_now(ddb_local: LocalAws, ddb: Any,
                                                      sqs: Any, queue_url: str,
                                                      unique_id: str) -> None:
    """Its order queue gets the handoff nudge (naming it); the shared queue's copy is delayed
    until the hold ends, so no other worker sees it before."""
    inbox = sqs.create_queue(QueueName=order_queue_name(PREFIX, SUCCESSOR))["QueueUrl"]
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX)
    now = wall_clock_ms()
    assert route(event(handoff_record(unique_id, now)), None, deps) == {"batchItemFailures": []}
    got = sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    bodies = [m["Body"] for m in got.get("Messages", [])]
    assert len(bodies) == 1
    said = parse_inbox_body(bodies[0], SUCCESSOR)
    assert isinstance(said, Nudge) and (said.conn_id, said.reason) == (unique_id, REASON_HANDOFF)
    assert parse_inbox_body(bodies[0], "w-other#abc123") is None
    shared = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
    assert [parse_nudge(m["Body"]).conn_id for m in shared.get("Messages", [])
            if parse_nudge(m["Body"]).conn_id == unique_id] == []


def test_without_the_successors_queue_the_shared_nudge_goes_now(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, unique_id: str) -> None:
    """No order queue to tell it on: the shared queue carries the nudge at once (until the
    hold ends only the successor's acquire can succeed), and the record does not fail."""
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX)
    now = wall_clock_ms()
    assert route(event(handoff_record(unique_id, now, "w-gone#abc123")), None, deps) == {
        "batchItemFailures": []}
    shared = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    nudges = [parse_nudge(m["Body"]) for m in shared.get("Messages", [])]
    assert [(n.conn_id, n.reason) for n in nudges if n.conn_id == unique_id] == [
        (unique_id, REASON_HANDOFF)]


def test_handoffs_left_when_time_is_short_go_to_the_shared_queue_now(
        ddb_local: LocalAws, ddb: Any, sqs: Any, queue_url: str, unique_id: str) -> None:
    """An invocation already short of time (less than the send reserve left) tells no
    successor on its order queue, one call each: the handoff's shared nudge goes now instead
    (the first batch is always tried), and the successor's queue gets nothing."""
    inbox = sqs.create_queue(QueueName=order_queue_name(PREFIX, SUCCESSOR))["QueueUrl"]
    deps = deps_for(ddb_local, ddb, sqs, queue_url, PREFIX)
    short = LocalContext("holdfast-router", timeout_ms=SEND_RESERVE_MS - 1_000)
    assert route(event(handoff_record(unique_id, wall_clock_ms())), short, deps) == {
        "batchItemFailures": []}
    assert sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10).get("Messages") is None
    shared = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    assert unique_id in [parse_nudge(m["Body"]).conn_id for m in shared.get("Messages", [])]
