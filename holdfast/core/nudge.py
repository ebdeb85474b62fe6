"""The nudge: the message router and sweeper send and workers receive ("go and claim this").

Body: ``{"conn_id": str, "reason": str, "epoch": int | null}``, compact JSON. ``epoch`` is the
fencing epoch the sender saw (null when it did not see the item, e.g. the sweeper's keys-only
index); a nudge is only a hint and the conditional acquire decides, so the one parser below is
strict about ``conn_id`` (without it there is nothing to claim) and lenient about the rest: a
missing or malformed ``reason`` or ``epoch`` is read as empty, and unknown keys are ignored.
A worker that hands a nudge on (it shed that stream a moment ago, or it is above its
rebalancing share and the nudge is for a moved stream) adds ``HOPS``: how often it was handed
on, so a nudge cannot bounce between the only pollers for ever. ``REASON_MOVED`` is the router's
reason for the release of a rebalancing move (``moved_at_ms`` changed with it);
``REASON_HANDOFF`` for a release that named its successor (``successor``), which the router
also sends to that worker's order queue (``holdfast.core.directives.handoff_body``).
``REASON_INSERTED`` (the router's nudge for a new item) may carry ``WS_URL``, the item's URL
as the change record had it, when the item could be connected before its claim (no checkpoint,
no owner, no back-off, no ``single_connection`` attribute): the worker then connects without
reading the item first (``worker.prestart``); the acquire still decides, and the socket is used
only if the acquired lease has that URL. The URL is used only while the nudge is fresh
(``url_if_fresh``): a nudge received late or again (a worker that started long after the
insert, a redelivery) may be for a stream someone holds by now, and connecting to it would
cost its upstream a connection for nothing.
A back-off nudge is sent with ``DelaySeconds`` (not part of the body) so it arrives when the
lease becomes claimable.

Tracing (``holdfast.core.tracing``): the sender's W3C ``traceparent``, when it traces, rides as
the string message attribute ``TRACE_ATTRIBUTE``, not in the body, so a nudge reads the same
with tracing on or off.

``send_nudges`` (the router, the sweeper, the task-stopped reporter) sends nudges in
``SendMessageBatch`` calls, bounded: up to ``attempts`` rounds, each retrying only the entries
that failed for a reason worth retrying (SQS said it was its fault, or the call did not
answer). What is still unsent is returned so the caller can report it (the router fails that
change record).
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core import jsontext
from holdfast.core.model import validate_conn_id

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = [
    "HOPS",
    "MAX_DELAY_S",
    "MAX_URL_CHARS",
    "REASON_EXPIRED",
    "REASON_HANDOFF",
    "REASON_INSERTED",
    "REASON_MOVED",
    "REASON_REAPED",
    "REASON_REPORTED",
    "REASON_UNCLAIMED",
    "SEND_CONCURRENCY",
    "SQS_BATCH_LIMIT",
    "TO",
    "TRACE_ATTRIBUTE",
    "URL_FRESH_MS",
    "WS_URL",
    "Nudge",
    "Outgoing",
    "SendReport",
    "nudge_delay_s",
    "parse_nudge",
    "send_nudges",
    "trace_attributes",
    "traceparent_of",
    "url_if_fresh",
]

MAX_DELAY_S = 900  # SQS's maximum DelaySeconds
SQS_BATCH_LIMIT = 10  # SQS's maximum entries per SendMessageBatch
# SendMessageBatch calls in flight at once (botocore's default pool holds 10 connections).
SEND_CONCURRENCY = 8
HOPS = "hops"  # body key: hand-ons so far (worker.claimer)
WS_URL = "ws_url"  # body key of an inserted nudge: the new item's URL (worker.prestart)
# Longer URLs are not carried (the worker reads the item instead): a nudge stays a small message.
MAX_URL_CHARS = 2_048
# How long after it was sent an inserted nudge's URL is used without reading the item: within
# it, only a duplicate of the nudge can have led another worker to the stream first.
URL_FRESH_MS = 1_000
TO = "owner"  # body key of a handoff nudge on an order queue: the successor it is for
# A new item's nudge (the router): the worker may connect before its claim (worker.prestart).
REASON_INSERTED = "inserted"
REASON_MOVED = "moved"  # a rebalancing move's release: over-share workers hand it on
# A release that named its successor: sent to that worker's order queue at once, and to the
# shared queue delayed until the hold ends (anyone may take it then).
REASON_HANDOFF = "handoff"
# A dead worker's stream, nudged by the sweeper on a live worker's order queue as well as the
# shared queue: a killed worker's long polls still pending on the shared queue can swallow a
# nudge there until its visibility timeout (measured: 5 s late, one stream in 60).
REASON_REAPED = "reaped"
# The sweeper's nudge of an orphan: never claimed (or released: expiry 0), or its lease expired;
# the platform report's nudge of a stopped task's streams. Informational (the ``Nudges`` metric's
# reason, the worker's logs, the benches): a worker claims them all alike.
REASON_UNCLAIMED = "unclaimed"
REASON_EXPIRED = "expired"
REASON_REPORTED = "reported"
TRACE_ATTRIBUTE = "traceparent"  # the SQS message attribute (W3C trace context)


@dataclass(frozen=True, slots=True)
class Nudge:
    """One "go and claim this connection" hint."""

    conn_id: str
    reason: str
    epoch: int | None = None
    delay_s: int = 0
    traceparent: str | None = field(default=None, compare=False)
    hops: int = 0  # how often a worker handed it on (worker.claimer); absent from the body at 0
    # The successor a handoff nudge on an order queue is for (None on the shared queue): an
    # order queue's reader takes only what names it (``directives.parse_inbox_body``).
    to: str | None = None
    # The new item's URL (``REASON_INSERTED`` only, see the module): the worker may connect
    # without reading the item. A hint: the acquire decides.
    ws_url: str | None = None

    def __post_init__(self) -> None:
        if not self.conn_id:
            raise ValueError("a nudge needs a connection id")
        if not 0 <= self.delay_s <= MAX_DELAY_S:
            raise ValueError(f"delay_s must be within [0, {MAX_DELAY_S}], not {self.delay_s}")

    def body(self) -> str:
        """The message body, compact JSON."""
        obj: dict[str, Any] = {"conn_id": self.conn_id, "reason": self.reason,
                               "epoch": self.epoch}
        if self.hops:
            obj[HOPS] = self.hops
        if self.to is not None:
            obj[TO] = self.to
        if self.ws_url is not None:
            obj[WS_URL] = self.ws_url
        return json.dumps(obj, separators=(",", ":"))

    def handed_on(self) -> Nudge:
        """This nudge as a worker hands it on: one hop more."""
        return dataclasses.replace(self, hops=self.hops + 1, delay_s=0)


def url_if_fresh(nudge: Nudge, sent_ms: int | None, receives: int, now_ms: int) -> str | None:
    """``nudge``'s URL if it may be used without reading the item: received for the first time
    within ``URL_FRESH_MS`` of ``sent_ms`` (SQS's ``SentTimestamp``; None: unknown, not used)."""
    if nudge.ws_url is None or sent_ms is None or receives > 1:
        return None
    return nudge.ws_url if now_ms - sent_ms <= URL_FRESH_MS else None


def trace_attributes(traceparent: str | None) -> dict[str, Any]:
    """SQS ``MessageAttributes`` carrying ``traceparent`` (empty without one)."""
    if not traceparent:
        return {}
    return {TRACE_ATTRIBUTE: {"DataType": "String", "StringValue": traceparent}}


def traceparent_of(message: dict[str, Any]) -> str | None:
    """The ``traceparent`` a received SQS message carries (None: none, or not a string)."""
    attrs = message.get("MessageAttributes")
    attr = attrs.get(TRACE_ATTRIBUTE) if isinstance(attrs, dict) else None
    value = attr.get("StringValue") if isinstance(attr, dict) else None
    return value if isinstance(value, str) and value else None


def parse_nudge(body: str) -> Nudge:
    """The nudge in a message body; ``ValueError`` says why the message is poison."""
    try:
        obj = jsontext.loads(body)
    except ValueError:
        raise ValueError("body is not JSON") from None
    if not isinstance(obj, dict):
        raise ValueError(f"body is JSON {type(obj).__name__}, not an object")
    conn_id = obj.get("conn_id")
    if not isinstance(conn_id, str):
        raise ValueError("body has no string conn_id")
    reason = obj.get("reason")
    epoch = obj.get("epoch")
    hops = obj.get(HOPS)
    to = obj.get(TO)
    url = obj.get(WS_URL)
    return Nudge(validate_conn_id(conn_id), reason if isinstance(reason, str) else "",
                 epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
                 hops=hops if isinstance(hops, int) and not isinstance(hops, bool) and (
                     hops >= 0) else 0, to=to if isinstance(to, str) else None,
                 ws_url=url if isinstance(url, str) and 0 < len(url) <= MAX_URL_CHARS
                 else None)


def nudge_delay_s(wait_ms: int, *, slack_s: int = 0, least_s: int = 0) -> int | None:
    """Whole seconds (SQS's ``DelaySeconds``, or a received nudge's visibility) before the
    nudge of a stream claimable ``wait_ms`` from now should come: rounded up (never early),
    plus ``slack_s``, at least ``least_s``; None past ``MAX_DELAY_S`` (the sweeper nudges it
    then). The one rule of the router's delayed nudges (no slack: the claimable time
    carries the skew) and a worker's nudge refused for a back-off (``slack_s=1``, for the
    clocks' jitter; at least a second: a visibility of 0 would redeliver it at once)."""
    seconds = math.ceil(wait_ms / 1000) + slack_s
    return None if seconds > MAX_DELAY_S else max(least_s, seconds)


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
