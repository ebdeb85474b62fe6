"""Many order-queue messages for one worker in one SQS message.

A stop, a shed or a deploy hands tens of streams to one successor at once: a handoff nudge per
stream, and WARM, READY and TAKE per warm handoff (``holdfast.core.handoff``). Sent one SQS
message each, the successor read them ten per receive (SQS's most), and a TAKE, whose stream
waits in its gap, queued behind the nudges: 6 s on the bench's deploy with three workers of
100 streams stopped at once. A bundle is one message ``{"owner": O, "bundle": [m, ...]}`` of
up to ``BUNDLE_MAX`` messages for owner O, each as it would be sent alone (its owner
included); the inbox unpacks it and reads each with its one parser
(``directives.parse_inbox_body``). A bundle of one is sent as that message alone. The
messages of a bundle share one SQS message's fate (sent, received, redelivered together)
and lose their own trace attribute.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

from holdfast.core import jsontext
from holdfast.core.sending import M, Outgoing, SendReport, send_nudges

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["BUNDLE", "BUNDLE_MAX", "Letter", "bundle_body", "in_bundles", "packed", "send_bundled",
           "unbundle"]

T = TypeVar("T")

BUNDLE: Final = "bundle"
# Messages are 80-250 bytes: 500 stay far below SQS's 256 KiB per message.
BUNDLE_MAX: Final = 500


def bundle_body(owner: str, bodies: Sequence[str]) -> str:
    """One message carrying ``bodies`` (each a JSON object naming ``owner``)."""
    return json.dumps({"owner": owner, BUNDLE: [json.loads(b) for b in bodies]},
                      separators=(",", ":"))


def packed(owner: str, bodies: Sequence[str]) -> str:
    """One message for ``bodies`` (at most ``BUNDLE_MAX``): a bundle, or the body itself if
    there is one only."""
    return bodies[0] if len(bodies) == 1 else bundle_body(owner, bodies)


def in_bundles(messages: Sequence[T]) -> list[Sequence[T]]:
    """``messages`` cut into the runs that one bundle each carries."""
    return [messages[i:i + BUNDLE_MAX] for i in range(0, len(messages), BUNDLE_MAX)]


def unbundle(body: str, owner: str) -> list[str]:
    """The messages in ``body``: a bundle's (for ``owner``, at most ``BUNDLE_MAX``, each
    re-encoded for the one parser), or ``body`` itself if it is no bundle. A bundle for
    another owner, or a malformed one, holds nothing."""
    try:
        data = jsontext.loads(body)
    except (TypeError, ValueError):
        return [body]  # the parser says what is wrong with it
    if not isinstance(data, dict) or BUNDLE not in data:
        return [body]
    inner = data[BUNDLE]
    if data.get("owner") != owner or not isinstance(inner, list):
        return []
    return [json.dumps(m, separators=(",", ":")) for m in inner[:BUNDLE_MAX]
            if isinstance(m, dict)]


@dataclass(frozen=True, slots=True)
class Letter:
    """A message body as it is (a bundle, a handoff step already addressed)."""

    text: str
    delay_s: int = 0
    traceparent: str | None = None

    def body(self) -> str:
        return self.text


def send_bundled(sqs: SQSClient, queue_url: str, owner: str, messages: Sequence[M], *,
                 attempts: int = 2) -> SendReport[M]:
    """Send ``messages`` (all for ``owner``, none delayed) to ``queue_url`` in bundles, ten
    bundles per call; what was sent and what failed, per message."""
    chunks = in_bundles(messages)
    outgoing: list[Outgoing] = [c[0] if len(c) == 1 else Letter(
        bundle_body(owner, [m.body() for m in c])) for c in chunks]
    held = {id(o): c for o, c in zip(outgoing, chunks, strict=True)}  # sent -> its messages
    sent = send_nudges(sqs, queue_url, outgoing, attempts=attempts)
    out: SendReport[M] = SendReport(calls=sent.calls)
    out.sent.extend(m for o in sent.sent for m in held[id(o)])
    out.failed.extend((m, why) for o, why in sent.failed for m in held[id(o)])
    return out
