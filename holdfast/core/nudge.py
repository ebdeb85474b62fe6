"""The nudge: the message router and sweeper send and workers receive ("go and claim this").

Body: ``{"conn_id": str, "reason": str, "epoch": int | null}``, compact JSON. ``epoch`` is the
fencing epoch the sender saw (null when it did not see the item, e.g. the sweeper's keys-only
index); a nudge is only a hint and the conditional acquire decides, so the one parser below is
strict about ``conn_id`` (without it there is nothing to claim) and lenient about the rest: a
missing or malformed ``reason`` or ``epoch`` is read as empty, and unknown keys are ignored.
A worker that hands a nudge on (it shed that stream a moment ago, or it is above its
rebalancing share and the nudge is for a moved stream) adds ``HOPS``: how often it was handed
on, so a nudge cannot bounce between the only pollers for ever. ``REASON_MOVED`` is the router's
reason for the release of a rebalancing move (``moved_at_ms`` changed with it).
A back-off nudge is sent with ``DelaySeconds`` (not part of the body) so it arrives when the
lease becomes claimable.

Tracing (``holdfast.core.tracing``): the sender's W3C ``traceparent``, when it traces, rides as
the string message attribute ``TRACE_ATTRIBUTE``, not in the body, so a nudge reads the same
with tracing on or off.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from holdfast.core.model import validate_conn_id

__all__ = ["HOPS", "MAX_DELAY_S", "REASON_MOVED", "TRACE_ATTRIBUTE", "Nudge", "delay_until",
           "parse_nudge", "trace_attributes", "traceparent_of"]

MAX_DELAY_S = 900  # SQS's maximum DelaySeconds
HOPS = "hops"  # body key: hand-ons so far (worker.claimer)
REASON_MOVED = "moved"  # a rebalancing move's release: over-share workers hand it on
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
        return json.dumps(obj, separators=(",", ":"))

    def handed_on(self) -> Nudge:
        """This nudge as a worker hands it on: one hop more."""
        return dataclasses.replace(self, hops=self.hops + 1, delay_s=0)


    def message_attributes(self) -> dict[str, Any]:
        """The SQS ``MessageAttributes`` of this nudge (empty when it carries no trace)."""
        return trace_attributes(self.traceparent)


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
        obj = json.loads(body)
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
    return Nudge(validate_conn_id(conn_id), reason if isinstance(reason, str) else "",
                 epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
                 hops=hops if isinstance(hops, int) and not isinstance(hops, bool) and (
                     hops >= 0) else 0)


def delay_until(target_ms: int, now_ms: int) -> int:
    """Whole seconds to wait from ``now_ms`` until ``target_ms`` (rounded up), within SQS limits."""
    return max(0, min(MAX_DELAY_S, math.ceil((target_ms - now_ms) / 1000)))
