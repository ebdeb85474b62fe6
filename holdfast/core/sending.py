"""Sending messages to a queue in ``SendMessageBatch`` calls, bounded and retried.

``send_nudges`` (the router, the sweeper, the task-stopped reporter; a worker's handoff steps
through ``holdfast.core.bundles``) sends in batches of ``SQS_BATCH_LIMIT``, up to ``attempts``
rounds, each retrying only the entries that failed for a reason worth retrying (SQS said it was
its fault, or the call did not answer). What is still unsent is returned so the caller can
report it (the router fails that change record).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.nudge import trace_attributes

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["SEND_CONCURRENCY", "SQS_BATCH_LIMIT", "M", "Outgoing", "SendReport", "send_nudges"]

SQS_BATCH_LIMIT = 10  # SQS's maximum entries per SendMessageBatch
# SendMessageBatch calls in flight at once (botocore's default pool holds 10 connections).
SEND_CONCURRENCY = 8


class Outgoing(Protocol):
    """What ``send_nudges`` sends: a ``Nudge``, or any message with a body (a worker's
    handoff steps, ``worker.outbox``)."""

    @property
    def delay_s(self) -> int: ...

    @property
    def traceparent(self) -> str | None: ...

    def body(self) -> str: ...


M = TypeVar("M", bound=Outgoing)


@dataclass
class SendReport(Generic[M]):
    """What ``send_nudges`` achieved: every input message is in exactly one of the two lists."""

    sent: list[M] = field(default_factory=list)
    failed: list[tuple[M, str]] = field(default_factory=list)
    calls: int = 0


def _in_waves(chunks: list[list[int]], send: Callable[[list[int]], None],
              out_of_time: Callable[[], bool], *, first: bool) -> int:
    """Send ``chunks``, ``SEND_CONCURRENCY`` at a time, asking ``out_of_time()`` before each
    wave (what is left then is the caller's "out of time"); with ``first`` (nothing sent yet)
    the first chunk goes whatever it says. Returns the calls made."""
    calls = 0
    pool: ThreadPoolExecutor | None = None
    try:
        for start in range(0, len(chunks), SEND_CONCURRENCY):
            wave = chunks[start:start + SEND_CONCURRENCY]
            if out_of_time():
                if calls or not first:
                    break
                wave = wave[:1]
            calls += len(wave)
            if len(wave) == 1:
                send(wave[0])
            else:
                pool = pool or ThreadPoolExecutor(SEND_CONCURRENCY,
                                                  thread_name_prefix="holdfast-send")
                list(pool.map(send, wave))
    finally:
        if pool is not None:
            pool.shutdown()
    return calls


def send_nudges(sqs: SQSClient, queue_url: str, nudges: Sequence[M], *, attempts: int = 3,
                backoff_s: float = 0.05, sleep: Callable[[float], object] = time.sleep,
                out_of_time: Callable[[], bool] = lambda: False) -> SendReport[M]:
    """Send ``nudges`` in batches of 10; retry retryable failures up to ``attempts`` rounds.

    The batches of one round go side by side (``SEND_CONCURRENCY`` calls at once): one after
    the other, the last of 300 new streams' nudges waited for 29 calls (1-1.5 s on a loaded
    machine) before it left the router. ``out_of_time()`` is asked before each wave of
    ``SEND_CONCURRENCY`` calls (a call at its worst is what the caller's reserve covers, and a
    round of 40 batches is five waves): once it says so, what is still pending fails at once (a
    Lambda about to time out should report, not hang), except the first batch, which is always
    tried.
    """
    report: SendReport[M] = SendReport()
    pending = dict(enumerate(nudges))
    errors: dict[int, str] = {}  # the last error of each pending nudge
    lock = threading.Lock()  # the batches of a round answer on their own threads

    def send(chunk: list[int]) -> None:
        entries: list[Any] = []
        for i in chunk:
            entry: dict[str, Any] = {"Id": str(i), "MessageBody": pending[i].body()}
            if pending[i].delay_s:
                entry["DelaySeconds"] = pending[i].delay_s
            if pending[i].traceparent:  # the receiver's claim joins the sender's trace
                entry["MessageAttributes"] = trace_attributes(pending[i].traceparent)
            entries.append(entry)
        try:
            resp = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        except ClientError as exc:
            # A refused call (no such queue, access denied...) fails the whole chunk this round.
            err = exc.response.get("Error", {})
            detail = f"{err.get('Code', 'ClientError')}: {err.get('Message', '')}"[:300]
            with lock:
                errors.update((i, detail) for i in chunk)
            return
        except BotoCoreError as exc:
            with lock:
                errors.update((i, f"{type(exc).__name__}: {exc}"[:300]) for i in chunk)
            return
        with lock:
            for ok in resp.get("Successful", []):
                report.sent.append(pending.pop(int(ok["Id"])))
            for bad in resp.get("Failed", []):
                i = int(bad["Id"])
                detail = f"{bad.get('Code', '?')}: {bad.get('Message', '')}"[:300]
                if bad.get("SenderFault"):
                    # Our request was wrong for this entry; sending it again cannot succeed.
                    report.failed.append((pending.pop(i), detail))
                else:
                    errors[i] = detail

    for attempt in range(max(1, attempts)):
        if attempt:
            sleep(backoff_s * 2 ** (attempt - 1))
        ids = list(pending)
        chunks = [ids[i:i + SQS_BATCH_LIMIT] for i in range(0, len(ids), SQS_BATCH_LIMIT)]
        report.calls += _in_waves(chunks, send, out_of_time, first=not report.calls)
        if not pending or (report.calls and out_of_time()):
            for i in pending:
                errors.setdefault(i, "out of time")
            break
    report.failed.extend((n, errors.get(i, "not sent")) for i, n in pending.items())
    return report
