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

Nudges are sent by ``holdfast.core.sending.send_nudges`` (bounded batches, retried).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from holdfast.core import jsontext
from holdfast.core.model import validate_conn_id

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
    "TO",
    "TRACE_ATTRIBUTE",
    "URL_FRESH_MS",
    "WS_URL",
    "Nudge",
    "nudge_delay_s",
    "parse_nudge",
    "trace_attributes",
    "traceparent_of",
    "url_if_fresh",
]

MAX_DELAY_S = 900  # SQS's maximum DelaySeconds
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
