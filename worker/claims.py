"""What a claim is asked and what it answers: the sources of a claim and its outcomes.

``Holdings.claim`` (``worker.holdings``) is the ``ClaimFn``; ``worker.claimer`` (the nudge
queue's poller) and ``worker.reconciler`` (the sweep) call it and act on the ``Claim`` or
``Later`` it returns. Split from ``worker.claimer`` so that those who only speak this
vocabulary (``worker.claimrules``, ``worker.acquiring``) need not import the poller.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

__all__ = ["SOURCE_HANDOFF", "SOURCE_INSERTED", "SOURCE_MOVED", "Claim", "ClaimFn", "Later"]

SOURCE_MOVED = "moved"  # the claim's source for a moved stream's nudge (worker.holdings)
SOURCE_HANDOFF = "handoff"  # a stream released to us by name, from our order queue
SOURCE_INSERTED = "inserted"  # a new stream's nudge: connected before its claim (worker.prestart)


class Claim(Enum):
    """The outcome of one claim attempt, as the message handling needs it."""

    CLAIMED = "claimed"
    CONFLICT = "conflict"  # definitive no: delete the nudge
    UNAVAILABLE = "unavailable"  # try again later: redeliver after a delay
    NO_CAPACITY = "no_capacity"  # full or stopping: hand the nudge to another worker now
    # Not ours to take now: we shed it a moment ago (never take it back), our release of it
    # is still being answered, or we hold it past its fence (``worker.claimrules``). Handed on;
    # after ``worker.claimer.MAX_HOPS`` it waits a second instead.
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Later:
    """Not claimable yet (in back-off) but soon: show the nudge again in ``seconds``."""

    seconds: int


class ClaimFn(Protocol):
    """``Holdings.claim``: (conn_id, source, the inserted nudge's URL) -> outcome."""

    def __call__(self, conn_id: str, source: str = ..., *,
                 ws_url: str | None = ...) -> Awaitable[Claim | Later]: ...
