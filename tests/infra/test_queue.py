"""The nudge queue, its DLQ and the router's failure queue: redrive, encryption, TLS only."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Match

from holdfast.core import schema
from tests.infra.conftest import resources


def test_nudge_queue_redrives_to_the_dlq(template: Any) -> None:
    """Nudges use the shared visibility timeout and move to the DLQ after the shared count."""
    template.has_resource_properties("AWS::SQS::Queue", {
        "VisibilityTimeout": schema.QUEUE_VISIBILITY_TIMEOUT_S,
        "RedrivePolicy": {"deadLetterTargetArn": Match.any_value(),
                          "maxReceiveCount": schema.DLQ_MAX_RECEIVE_COUNT},
    })


def test_every_queue_is_encrypted(template_json: dict[str, Any]) -> None:
    """All four queues (nudges, their DLQ, router and taskstopped failures) use SQS-managed
    server-side encryption."""
    queues = resources(template_json, "AWS::SQS::Queue")
    assert len(queues) == 4
    assert all(q["Properties"].get("SqsManagedSseEnabled") is True for q in queues.values())


def test_every_queue_refuses_plain_http(template_json: dict[str, Any]) -> None:
    """Each queue has a policy denying any request without TLS."""
    queues = set(resources(template_json, "AWS::SQS::Queue"))
    covered = set()
    for policy in resources(template_json, "AWS::SQS::QueuePolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        if any(s["Effect"] == "Deny" and
               s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
               for s in statements):
            covered |= {q["Ref"] for q in policy["Properties"]["Queues"]}
    assert covered == queues, json.dumps(sorted(queues - covered))
