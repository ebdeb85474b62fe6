"""A session item's own judgements (``holdfast.core.session_items``): whether it is live, and
what the sweeper does with it."""

from __future__ import annotations

import dataclasses

import pytest

from holdfast.core.schema import SessionState
from holdfast.core.session_items import SessionItem

SKEW_MS = 1_000
ALIVE = SessionItem("w1", "inc", SessionState.ALIVE, expires_at_ms=10_000)


@pytest.mark.parametrize(("now", "live"), [
    (5_000, True), (10_000, True), (10_999, True), (11_000, False), (60_000, False)])
def test_an_alive_session_is_live_until_silent_past_its_ttl_and_the_skew(
        now: int, live: bool) -> None:
    """ALIVE: live until its expiry plus the skew has passed (the acquire's own cut-off)."""
    assert ALIVE.live(now, SKEW_MS) is live


@pytest.mark.parametrize("state", [SessionState.DEAD, SessionState.ENDED])
def test_a_dead_or_ended_session_is_never_live(state: SessionState) -> None:
    """DEAD or ENDED: not live, however far its expiry."""
    assert not dataclasses.replace(ALIVE, state=state).live(5_000, SKEW_MS)


@pytest.mark.parametrize(("state", "reaped", "now", "action"), [
    (SessionState.ALIVE, False, 10_999, "wait"),
    (SessionState.ALIVE, False, 11_000, "declare_dead"),
    (SessionState.ALIVE, True, 11_000, "declare_dead"),
    (SessionState.DEAD, False, 5_000, "reap"),
    (SessionState.ENDED, False, 5_000, "reap"),
    (SessionState.DEAD, True, 60_000, "none"),
    (SessionState.ENDED, True, 60_000, "none"),
])
def test_the_sweeper_waits_for_a_live_session_and_reaps_an_ended_one_once(
        state: SessionState, reaped: bool, now: int, action: str) -> None:
    """The sweep's action: wait while live, declare dead once silent, reap until reaped."""
    item = dataclasses.replace(ALIVE, state=state, reaped=reaped)
    assert item.sweep_action(now, SKEW_MS) == action
