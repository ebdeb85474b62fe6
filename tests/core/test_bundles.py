"""Bundles: many order-queue messages for one worker in one SQS message, read back one by one."""

from __future__ import annotations

import json
from typing import Any

from holdfast.core.bundles import BUNDLE_MAX, bundle_body, send_bundled, unbundle
from holdfast.core.directives import parse_inbox_body
from holdfast.core.handoff import TAKE, HandoffStep
from holdfast.core.nudge import REASON_HANDOFF, Nudge
from holdfast.core.orders import Order

OWNER, PEER = "w-1#abc123", "w-2#def456"


def test_a_bundle_reads_back_as_its_messages_with_the_one_parser() -> None:
    """A nudge, a TAKE and a stop order in one bundle: each parses as if sent alone."""
    said = [Nudge("c1", REASON_HANDOFF, to=OWNER),
            HandoffStep(TAKE, "c2", 7, 41, PEER, 6), Order.stop("c3", 5)]
    bodies = [said[0].body(), said[1].body(OWNER), said[2].body(OWNER)]
    assert [parse_inbox_body(b, OWNER) for b in unbundle(bundle_body(OWNER, bodies), OWNER)
            ] == said


def test_what_is_no_bundle_passes_through_and_a_foreign_bundle_holds_nothing() -> None:
    """A plain message or garbage comes back as itself (the parser judges it); a bundle for
    another owner, or with no list, is empty; entries that are not objects are dropped; at
    most BUNDLE_MAX are read."""
    plain = Nudge("c1", REASON_HANDOFF, to=OWNER).body()
    assert unbundle(plain, OWNER) == [plain] and unbundle("not json", OWNER) == ["not json"]
    deep = '{"owner": "' + OWNER + '", "bundle": ' + "[" * 5000
    assert unbundle(deep, OWNER) == [deep]  # nested past the recursion limit: not JSON
    assert unbundle(bundle_body(OWNER, [plain]), "w-3#abc123") == []
    assert unbundle(json.dumps({"owner": OWNER, "bundle": "x"}), OWNER) == []
    assert len(unbundle(json.dumps({"owner": OWNER, "bundle": [1, "x", {}]}), OWNER)) == 1
    many = json.dumps({"owner": OWNER, "bundle": [{}] * (BUNDLE_MAX + 5)})
    assert len(unbundle(many, OWNER)) == BUNDLE_MAX


def test_send_bundled_packs_messages_into_few_sqs_messages(sqs: Any, unique_id: str) -> None:
    """1,001 nudges: three SQS messages (500, 500, 1 sent plain) in one call; every nudge
    comes back out; all reported sent."""
    url = sqs.create_queue(QueueName=f"{unique_id}-bundles")["QueueUrl"]
    nudges = [Nudge(f"c{i}", REASON_HANDOFF, to=OWNER) for i in range(2 * BUNDLE_MAX + 1)]
    report = send_bundled(sqs, url, OWNER, nudges)
    assert report.calls == 1 and report.sent == nudges and not report.failed
    got: list[str] = []
    while msgs := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        got += [m["Body"] for m in msgs]
    assert len(got) == 3
    out = [parse_inbox_body(b, OWNER) for body in got for b in unbundle(body, OWNER)]
    assert sorted(n.conn_id for n in out if isinstance(n, Nudge)) == sorted(
        n.conn_id for n in nudges)


def test_send_bundled_reports_every_message_of_a_failed_bundle(sqs: Any,
                                                             unique_id: str) -> None:
    """No such queue: every message is reported failed, with the reason."""
    url = sqs.create_queue(QueueName=f"{unique_id}-gone")["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    nudges = [Nudge(f"c{i}", REASON_HANDOFF, to=OWNER) for i in range(3)]
    report = send_bundled(sqs, url, OWNER, nudges, attempts=1)
    assert not report.sent and [n for n, _ in report.failed] == nudges
    assert all("NonExistentQueue" in why or "QueueDoesNotExist" in why
               for _, why in report.failed), report.failed
