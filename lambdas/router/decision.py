"""What the router does with one stream record: ``decide``'s answer (``router.decide``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from holdfast.core.nudge import REASON_HANDOFF, REASON_INSERTED, REASON_MOVED, Nudge
from holdfast.core.orders import ORDER_RELEASE, ORDER_RETAKE, ORDER_STOP, Order

__all__ = ["Decision", "Outcome", "Reason"]


class Outcome(StrEnum):
    NUDGE = "nudge"
    ORDER = "order"  # an order to the session that owns the stream
    SKIP = "skip"
    MALFORMED = "malformed"


class Reason(StrEnum):
    # Why a nudge is sent.
    INSERTED = REASON_INSERTED  # the worker may connect before claiming (worker.prestart)
    STARTED = "started"
    RELEASED = "released"
    GAVE_UP = "gave_up"
    QUARANTINED = "quarantined"
    REARMED = "rearmed"
    CHANGED = "changed"
    MOVED = REASON_MOVED  # a rebalancing move's release
    HANDOFF = REASON_HANDOFF  # a release that named its successor
    # Why an order is given (the order's verb, ``holdfast.core.orders``).
    STOP = ORDER_STOP
    RELEASE = ORDER_RELEASE
    RETAKE = ORDER_RETAKE  # a holding a write outside the protocol removed (``core.overwrites``)
    # Why a record is skipped.
    OWNED = "owned"
    NOT_STARTED = "not_started"
    REMOVED = "removed"
    UNCHANGED = "unchanged"
    NORMALISED = "normalised"
    HELD = "held"  # written again while held for its holder's take-back (``core.overwrites``)
    DEFERRED = "deferred"
    MALFORMED = "malformed"


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one record. ``normalise``: give the item ``lease_expires_at_ms = 0``;
    ``hold_until_ms``: raise it to that, so no worker claims the stream before (a take-back's
    hold: ``core.overwrites``)."""

    outcome: Outcome
    reason: Reason
    conn_id: str | None = None
    epoch: int | None = None
    delay_s: int = 0
    normalise: bool = False
    detail: str = ""
    owner: str | None = None  # with ORDER: the lease_owner concerned
    successor: str | None = None  # with NUDGE "handoff": the owner the release named
    ws_url: str | None = None  # with NUDGE "inserted": the URL to connect before the claim
    malformed: bool = False  # an ORDER built from a malformed image's raw attributes
    hold_until_ms: int | None = None

    @property
    def acts(self) -> bool:
        """True if the router may write anything (nudge, order, release, normalisation)."""
        return (self.outcome in (Outcome.NUDGE, Outcome.ORDER) or self.normalise
                or self.hold_until_ms is not None)

    def order(self) -> Order | None:
        """The order this decision gives its owner (None: not an order)."""
        if self.outcome is not Outcome.ORDER or self.conn_id is None:
            return None
        return Order(self.reason.value, self.conn_id, self.epoch)

    def nudge(self) -> Nudge | None:
        if self.outcome is not Outcome.NUDGE or self.conn_id is None:
            return None
        return Nudge(self.conn_id, self.reason.value, self.epoch, self.delay_s,
                     ws_url=self.ws_url)
