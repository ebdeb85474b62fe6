"""The nudge message (router and sweeper -> workers) and sending it in ``SendMessageBatch`` calls.

Body: ``{"conn_id": str, "reason": str, "epoch": int | null}`` — the worker parses exactly this.
``epoch`` is the fencing epoch the sender saw (null when it did not see the item, e.g. the
sweeper's keys-only index); a worker may use it to ignore a stale nudge, but a nudge is only a
hint: the conditional acquire decides. A back-off nudge carries ``DelaySeconds`` so it arrives
when the lease becomes claimable.

Sending is bounded: up to ``attempts`` rounds, each retrying only the entries that failed for a
reason worth retrying (SQS said it was its fault, or the call did not answer). What is still
unsent is returned so the caller can report it (the router fails that stream record).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = [
    "MAX_DELAY_S",
    "SQS_BATCH_LIMIT",
    "Nudge",
    "SendReport",
    "delay_until",
    "send_nudges",
]

MAX_DELAY_S = 900  # SQS's maximum DelaySeconds
SQS_BATCH_LIMIT = 10  # SQS's maximum entries per SendMessageBatch


@dataclass(frozen=True, slots=True)
class Nudge:
    """One "go and claim this connection" hint."""

    conn_id: str
    reason: str
    epoch: int | None = None
    delay_s: int = 0

    def __post_init__(self) -> None:
        if not self.conn_id:
            raise ValueError("a nudge needs a connection id")
        if not 0 <= self.delay_s <= MAX_DELAY_S:
            raise ValueError(f"delay_s must be within [0, {MAX_DELAY_S}], not {self.delay_s}")

    def body(self) -> str:
        """The message body, compact JSON."""
        return json.dumps({"conn_id": self.conn_id, "reason": self.reason, "epoch": self.epoch},
                          separators=(",", ":"))

    @classmethod
    def from_body(cls, body: str) -> Nudge:
        """Parse a message body; ``ValueError`` naming the problem if it is not a nudge."""
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ValueError(f"nudge body is not JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("conn_id"), str):
            raise ValueError("nudge body must be an object with a string conn_id")
        epoch = data.get("epoch")
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool)):
            raise ValueError("nudge epoch must be an integer or null")
        return cls(data["conn_id"], str(data.get("reason", "")), epoch)


def delay_until(target_ms: int, now_ms: int) -> int:
    """Whole seconds to wait from ``now_ms`` until ``target_ms`` (rounded up), within SQS limits."""
    return max(0, min(MAX_DELAY_S, math.ceil((target_ms - now_ms) / 1000)))


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
