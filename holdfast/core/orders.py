"""Orders to one worker: their vocabulary, and the per-worker SQS queue that carries them.

An order reaches its worker two ways, and the first one wins. There are two verbs, and both end
a holding the only way one may end while its holder lives, by the holder's own release
(``docs/concepts/protocol.md``): ``stop`` (the stream was set STOPPED or deleted: it stays
unowned) and ``release`` (someone forced the holding free, e.g. the seed's release with the
owner kept: the holder stops delivering, releases, and the release record gets the stream
claimed again).

- **the order queue** (fast path): each live session has an SQS queue of its own, named from
  its owner (worker id and incarnation), which the worker long-polls. The router derives the
  queue's URL from the nudge queue's URL and the owner, so it needs no lookup: a message is
  in the worker's hands tens of milliseconds after the router saw the record.
- **the session item** (durable path): the same order is added to the session's ``orders``
  set, which the worker reads with its next heartbeat. It covers a lost or late message and
  a worker whose queue is gone.

An order names the epoch of the stream it is about, so a late copy (the slower path, or a
redelivered message) can never stop a newer holding of the same stream. Worker ids may hold
characters SQS queue names do not (``.:@/+=``): those become ``_``, and a name that had to be
changed or shortened gets a hash of the owner, so two owners never share a queue.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Final

from botocore.exceptions import ClientError

__all__ = [
    "MAX_PREFIX_LEN",
    "ORDERS_MARK",
    "ORDER_RELEASE",
    "ORDER_RETAKE",
    "ORDER_STOP",
    "Order",
    "is_missing_queue",
    "order_queue_name",
    "order_queue_names_start",
    "order_queue_url",
    "parse_order",
    "prefix_for",
    "validate_prefix",
]

ORDER_STOP: Final = "stop"
ORDER_RELEASE: Final = "release"
# Take back a holding a write outside the protocol removed (``holdfast.core.overwrites``).
ORDER_RETAKE: Final = "retake"
_VERBS = frozenset({ORDER_STOP, ORDER_RELEASE, ORDER_RETAKE})
MAX_PREFIX_LEN: Final = 40
# Every prefix ends with it (``prefix_for``): a collector tells another fleet's queues by it.
ORDERS_MARK: Final = "-orders-"
_MAX_NAME = 80  # SQS: 1-80 of [A-Za-z0-9_-]
_SHORTENED = _MAX_NAME - 13  # a changed or long name's kept part, then "-" and a 12-hex digest
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_PREFIX = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_PREFIX_LEN}}}$")
# The Query protocol's code, and the JSON protocol's (newer botocore speaks JSON to SQS).
_MISSING_QUEUE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})


@dataclass(frozen=True, slots=True)
class Order:
    """One order to a worker: ``verb`` (``stop``, ``release`` or ``retake``) for ``conn_id``
    at ``epoch``."""

    verb: str
    conn_id: str
    epoch: int | None = None

    @classmethod
    def stop(cls, conn_id: str, epoch: int | None = None) -> Order:
        return cls(ORDER_STOP, conn_id, epoch)

    def encode(self) -> str:
        """The session-set form: ``stop:<id>`` or ``stop#<epoch>:<id>`` (ids never hold ``#``)."""
        head = self.verb if self.epoch is None else f"{self.verb}#{self.epoch}"
        return f"{head}:{self.conn_id}"

    def body(self, owner: str) -> str:
        """The order-queue message body; it names its owner so a reused queue cannot mislead."""
        return json.dumps({"order": self.encode(), "owner": owner}, separators=(",", ":"))

    def applies_to(self, held_epoch: int | None) -> bool:
        """True if this order is about the holding at ``held_epoch`` (or names no epoch)."""
        return self.epoch is None or held_epoch is None or self.epoch >= held_epoch


def parse_order(text: str) -> Order | None:
    """The order in a session-set entry; None for anything this version does not know."""
    if not isinstance(text, str):
        return None
    head, sep, conn_id = text.partition(":")
    verb, _, epoch_text = head.partition("#")
    if not sep or not conn_id or verb not in _VERBS or len(conn_id) > 200:
        return None
    if not epoch_text:
        return Order(verb, conn_id) if "#" not in head else None
    if not epoch_text.isdigit() or len(epoch_text) > 18:
        return None
    return Order(verb, conn_id, int(epoch_text))


def validate_prefix(prefix: str) -> str:
    """``prefix`` if it can start an SQS queue name with room for an owner; else ValueError."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"order queue prefix {prefix[:60]!r}: 1-{MAX_PREFIX_LEN} characters "
                         "of letters, digits, - and _")
    return prefix


def prefix_for(base: str) -> str:
    """A valid order-queue prefix derived from ``base`` (a stack or lease-table name).

    A name that had to be shortened or changed gets a hash of the whole of it: two stacks whose
    names share their first 32 characters must not share a prefix, or each one's sweeper would
    delete the other's queues (they belong to no session of its own).
    """
    safe, room = _UNSAFE.sub("-", base), MAX_PREFIX_LEN - len(ORDERS_MARK)
    if safe != base or len(safe) > room:
        safe = f"{safe[:room - 7]}-{hashlib.sha256(base.encode()).hexdigest()[:6]}"
    return validate_prefix(safe + ORDERS_MARK)


def order_queue_name(prefix: str, owner: str) -> str:
    """The name of the order queue of the session ``owner`` (``<worker id>#<incarnation>``)."""
    validate_prefix(prefix)
    safe = _UNSAFE.sub("_", owner)
    name = prefix + safe
    if safe != owner or len(name) > _MAX_NAME:
        digest = hashlib.sha256(owner.encode()).hexdigest()[:12]
        name = f"{name[:_SHORTENED]}-{digest}"
    return name


def order_queue_names_start(prefix: str, worker_id: str) -> str:
    """What the name of every order queue of ``worker_id``'s sessions begins with, whatever
    the incarnation: an owner holds "#", never safe, so ``order_queue_name`` always shortens
    it to ``_SHORTENED`` before its digest."""
    validate_prefix(prefix)
    return (prefix + _UNSAFE.sub("_", f"{worker_id}#"))[:_SHORTENED]


def order_queue_url(nudge_queue_url: str, prefix: str, owner: str) -> str:
    """The URL of ``owner``'s order queue: same endpoint and account as the nudge queue."""
    base, sep, _ = nudge_queue_url.rstrip("/").rpartition("/")
    if not sep or not base:
        raise ValueError(f"not a queue URL: {nudge_queue_url[:80]!r}")
    return f"{base}/{order_queue_name(prefix, owner)}"


def is_missing_queue(exc: BaseException) -> bool:
    """True for SQS's "no such queue" error (either spelling)."""
    return (isinstance(exc, ClientError)
            and exc.response.get("Error", {}).get("Code") in _MISSING_QUEUE)
