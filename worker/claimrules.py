"""Whether a nudge's claim goes on to the acquire, and what a refused acquire says to its
nudge: the rules, apart from the worker's state and clock.

``Holdings._claim`` gathers what it knows of the stream (``Seen``) and asks ``refusal``; None
means: acquire. An acquire refused for a back-off asks ``later_for`` when to see the nudge
again. Every answer here was once a bug at a seam (the comments say which), so they
live in one place, tested as a table (``tests/worker/test_claimrules.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from holdfast.core import rules
from holdfast.core.exceptions import AcquireFailed, LossReason
from holdfast.core.nudge import nudge_delay_s
from holdfast.worker.claims import Claim, Later

__all__ = ["Ours", "Seen", "later_for", "refusal"]


@dataclass(frozen=True, slots=True)
class Ours:
    """A stream this worker holds: stopping (drained, its release on its way), still live
    (not aborted, fenced or lost), past its fence (a worker just resumed from a pause)."""

    stopping: bool = False
    live: bool = True
    past_fence: bool = False


@dataclass(frozen=True, slots=True)
class Seen:
    """What the worker knows of one stream when its nudge comes."""

    ours: Ours | None = None  # None: not held here
    in_flight: bool = False  # being claimed here, or coming by a handoff
    moved: bool = False  # the nudge is a rebalancing move's
    shed_here: bool = False  # we shed it a moment ago (``Balancing.refuses``)
    room_for_moves: int = 1  # moved streams we may still take under our target's ceiling
    free: int = 1  # free capacity (0: full, stopping, draining or lagging)
    has_owner: bool = True  # a live session to acquire as


def refusal(seen: Seen) -> Claim | None:
    """The claim's outcome without a write, or None: acquire."""
    ours = seen.ours
    if ours is not None and (ours.stopping or not ours.live or ours.past_fence):
        # Ours until its release returns, but the release may have landed already and this
        # be its nudge (the router can be faster than the write's answer): handed on, not
        # deleted as a duplicate, or the stream waits unowned for the sweep. So is one past
        # its fence not yet stopped (the stream may have been reaped, and this be the nudge
        # for its next holder).
        return Claim.REFUSED
    if ours is not None or seen.in_flight:
        # Already ours (a duplicate nudge), being claimed, or coming by a handoff. Deleted:
        # shown again instead, a duplicate about an older state (a new stream's second
        # nudge) came back a second later to a worker that had just shed the stream, and it
        # took the stream back.
        return Claim.CONFLICT
    if seen.moved and (seen.shed_here or seen.room_for_moves <= 0):
        # A move: never straight back to us who shed it, nor past our share; handed on to a
        # worker below it. Any other nudge (its new holder died, a sweep found it unclaimed)
        # is ours if we have room: refusing it too, a failover soon after a rebalance hopped
        # between the workers that had shed the stream.
        return Claim.REFUSED
    if seen.free <= 0 or not seen.has_owner:
        return Claim.NO_CAPACITY  # handed on to another worker at once
    return None


def later_for(exc: AcquireFailed, skew_ms: int, now_wall_ms: int) -> Later | None:
    """For a stream in back-off: when its nudge should come back, if within SQS's
    ``DelaySeconds`` limit as the router's (None: let it go, the sweep finds it later)."""
    current = exc.current
    if exc.reason is not LossReason.BACKOFF or current is None or (
            current.lease_expires_at_ms is None):
        return None
    seconds = nudge_delay_s(rules.claimable_at_ms(current.lease_expires_at_ms, skew_ms)
                            - now_wall_ms, slack_s=1, least_s=1)
    return None if seconds is None else Later(seconds)
