"""Whether a nudge's claim goes on to the acquire, and when a back-off's nudge comes back: the
pure rules, as a table."""

from __future__ import annotations

import pytest

from holdfast.core.exceptions import AcquireFailed, LossReason
from holdfast.core.model import LeaseItem
from holdfast.worker.claimrules import Ours, Seen, later_for, refusal
from holdfast.worker.claims import Claim, Later


@pytest.mark.parametrize(("seen", "outcome"), [
    (Seen(), None),  # not ours, room, a session: acquire
    # Ours and live: a duplicate nudge, deleted.
    (Seen(ours=Ours()), Claim.CONFLICT),
    # Ours but its release is on its way, or no longer live, or past its fence: handed on
    # (this may be the nudge of the release that just landed, for the next holder).
    (Seen(ours=Ours(stopping=True)), Claim.REFUSED),
    (Seen(ours=Ours(live=False)), Claim.REFUSED),
    (Seen(ours=Ours(past_fence=True)), Claim.REFUSED),
    # Being claimed here, or on its way by a handoff: a duplicate.
    (Seen(in_flight=True), Claim.CONFLICT),
    (Seen(in_flight=True, free=0), Claim.CONFLICT),
    # A move: never back to who shed it, nor past the share; handed on.
    (Seen(moved=True, shed_here=True), Claim.REFUSED),
    (Seen(moved=True, room_for_moves=0), Claim.REFUSED),
    (Seen(moved=True), None),
    # Not a move: a stream we shed is ours again if we have room (a failover after a move).
    (Seen(shed_here=True, room_for_moves=0), None),
    # Full (or stopping, draining, lagging), or no session: to another worker at once.
    (Seen(free=0), Claim.NO_CAPACITY),
    (Seen(has_owner=False), Claim.NO_CAPACITY),
])
def test_what_a_nudge_gets_before_any_write(seen: Seen, outcome: Claim | None) -> None:
    """Each case of the table: refused, a duplicate, handed on, or on to the acquire."""
    assert refusal(seen) is outcome


def _refused(reason: LossReason, expires_at_ms: int | None) -> AcquireFailed:
    item = LeaseItem("c", "STARTED", "ws://x", None, expires_at_ms, None, 1)
    return AcquireFailed("c", reason, item)


def test_a_back_offs_nudge_comes_back_when_it_ends_others_are_deleted() -> None:
    """In back-off until 4.5 s from now (+ 250 ms skew): back in 6 s (rounded up, a second of
    jitter); ended already: in 1 s; past SQS's 15 minutes, or any other refusal: None."""
    assert later_for(_refused(LossReason.BACKOFF, 14_500), 250, 10_000) == Later(6)
    assert later_for(_refused(LossReason.BACKOFF, 9_000), 250, 10_000) == Later(1)
    assert later_for(_refused(LossReason.BACKOFF, 10_000 + 3_600_000), 250, 10_000) is None
    assert later_for(_refused(LossReason.HELD, 14_500), 250, 10_000) is None
    assert later_for(_refused(LossReason.BACKOFF, None), 250, 10_000) is None


def test_a_back_off_that_ended_long_ago_comes_back_in_a_second_not_at_once() -> None:
    """A back-off that ended seconds ago still comes back in 1 s, never 0 (a visibility of 0
    would redeliver the nudge at once)."""
    assert later_for(_refused(LossReason.BACKOFF, 1_000), 250, 10_000) == Later(1)
