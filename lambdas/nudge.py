"""Sending nudges (``holdfast.core.nudge``) in ``SendMessageBatch`` calls, bounded.

Up to ``attempts`` rounds, each retrying only the entries that failed for a reason worth
retrying (SQS said it was its fault, or the call did not answer). What is still unsent is
returned so the caller can report it (the router fails that change record).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.nudge import Nudge

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["SQS_BATCH_LIMIT", "SendReport", "send_nudges"]

SQS_BATCH_LIMIT = 10  # SQS's maximum entries per SendMessageBatch


@dataclass
class SendReport:
    """What ``send_nudges`` achieved: every input nudge is in exactly one of the two lists."""

    sent: list[Nudge] = field(default_factory=list)
    failed: list[tuple[Nudge, str]] = field(default_factory=list)
    calls: int = 0


def send_nudges(sqs: SQSClient, queue_url: str, nudges: Sequence[Nudge], *, attempts: int = 3,
                backoff_s: float = 0.05, sleep: Callable[[float], object] = time.sleep,
                out_of_time: Callable[[], bool] = lambda: False) -> SendReport:
    """Send ``nudges`` in batches of 10; retry retryable failures up to ``attempts`` rounds.

    ``out_of_time()`` is asked before every call but the first: once it says so, what is
    still pending fails at once (a Lambda about to time out should report, not hang).
    """
    sender = _Sender(sqs, queue_url, dict(enumerate(nudges)))
    for attempt in range(max(1, attempts)):
        if attempt:
            sleep(backoff_s * 2 ** (attempt - 1))
        ids = list(sender.pending)
        for start in range(0, len(ids), SQS_BATCH_LIMIT):
            if sender.report.calls and out_of_time():
                sender.errors.update((i, "out of time") for i in sender.pending)
                break
            sender.send(ids[start:start + SQS_BATCH_LIMIT])
        if not sender.pending or (sender.report.calls and out_of_time()):
            break
    sender.report.failed.extend(
        (n, sender.errors.get(i, "not sent")) for i, n in sender.pending.items())
    return sender.report


class _Sender:
    """One ``send_nudges`` call's state: what is still pending and the last error of each."""

    def __init__(self, sqs: SQSClient, queue_url: str, pending: dict[int, Nudge]) -> None:
        self.sqs, self.queue_url, self.pending = sqs, queue_url, pending
        self.errors: dict[int, str] = {}
        self.report = SendReport()

    def send(self, chunk: list[int]) -> None:
        entries: list[Any] = []
        for i in chunk:
            entry: dict[str, Any] = {"Id": str(i), "MessageBody": self.pending[i].body()}
            if self.pending[i].delay_s:
                entry["DelaySeconds"] = self.pending[i].delay_s
            if self.pending[i].traceparent:  # the receiver's claim joins the sender's trace
                entry["MessageAttributes"] = self.pending[i].message_attributes()
            entries.append(entry)
        self.report.calls += 1
        try:
            resp = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except ClientError as exc:
            # A refused call (no such queue, access denied...) fails the whole chunk this round.
            err = exc.response.get("Error", {})
            detail = f"{err.get('Code', 'ClientError')}: {err.get('Message', '')}"[:300]
            self.errors.update((i, detail) for i in chunk)
            return
        except BotoCoreError as exc:
            self.errors.update((i, f"{type(exc).__name__}: {exc}"[:300]) for i in chunk)
            return
        for ok in resp.get("Successful", []):
            self.report.sent.append(self.pending.pop(int(ok["Id"])))
        for bad in resp.get("Failed", []):
            i = int(bad["Id"])
            detail = f"{bad.get('Code', '?')}: {bad.get('Message', '')}"[:300]
            if bad.get("SenderFault"):
                # Our request was wrong for this entry; sending it again cannot succeed.
                self.report.failed.append((self.pending.pop(i), detail))
            else:
                self.errors[i] = detail
