"""Test helpers on the local AWS: private queues and tables, reading nudges back."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from holdfast.core.schema import table_definition
from holdfast.localaws import LocalAws
from tests.conftest import TIMEOUT_SCALE, client_for

__all__ = ["new_queue", "new_table", "receive_nudges"]


def new_queue(aws: LocalAws) -> str:
    """A fresh queue on the local SQS, so a test reads only its own nudges."""
    sqs = client_for(aws, "sqs")
    url: str = sqs.create_queue(QueueName=f"nudges-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    return url


def new_table(aws: LocalAws) -> str:
    """A fresh lease table (with stream and GSI) on the local DynamoDB."""
    ddb = client_for(aws, "dynamodb")
    name = f"leases-{uuid.uuid4().hex[:12]}"
    ddb.create_table(**table_definition(name))
    return name


def receive_nudges(sqs: Any, queue_url: str, *, expect: int, timeout_s: float = 5.0,
                   prefix: str = "") -> list[dict[str, Any]]:
    """Receive (and delete) nudge bodies until ``expect`` arrived or the timeout passed."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s * TIMEOUT_SCALE
    while len(found) < expect and time.monotonic() < deadline:
        resp = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10,
                                   WaitTimeSeconds=1)
        for msg in resp.get("Messages", []):
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=msg["ReceiptHandle"])
            body = json.loads(msg["Body"])
            if body["conn_id"].startswith(prefix):
                found.append(body)
    return found
