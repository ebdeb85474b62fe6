"""A session item's own judgements (``holdfast.core.session_items``): whether it is live, and
what the sweeper does with it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from holdfast.core.exceptions import MalformedItem
from holdfast.core.model import MAX_TIMESTAMP_MS
from holdfast.core.schema import SESSION, SessionState, session_pk_for
from holdfast.core.session_items import Beat, Session, SessionItem, new_incarnation

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


def session_raw(**extra: Any) -> dict[str, Any]:
    return {SESSION.pk: {"S": session_pk_for("w1")}, SESSION.incarnation: {"S": "inc"},
            SESSION.state: {"S": SessionState.ALIVE}, SESSION.expires_at_ms: {"N": "10000"},
            **extra}


def test_an_item_reads_back_what_it_records() -> None:
    """from_ddb reads every attribute: counts, times, orders (strings only), the reaped mark,
    the drain flag, the version; an item with only the required ones is ALIVE, no version."""
    item = SessionItem.from_ddb(session_raw(**{
        SESSION.heartbeat_at_ms: {"N": "9000"}, SESSION.held: {"N": "3"},
        SESSION.capacity: {"N": str(MAX_TIMESTAMP_MS)}, SESSION.orders: {"SS": ["a", 5, "b"]},
        SESSION.reaped_at_ms: {"N": "1"}, SESSION.started_at_ms: {"N": "0"},
        SESSION.ended_at_ms: {"N": "9500"}, SESSION.worker_version: {"S": "1.2.3"},
        SESSION.draining: {"BOOL": True}}))
    assert item == SessionItem("w1", "inc", SessionState.ALIVE, 10_000, 9_000, 3,
                               MAX_TIMESTAMP_MS, frozenset({"a", "b"}), True, 0, None, None,
                               True, 9_500, "1.2.3")
    bare = SessionItem.from_ddb(session_raw(**{SESSION.incarnation: {"S": "i" * 64}}))
    assert bare.live(5_000, SKEW_MS) and bare.version == "" and not bare.draining


@pytest.mark.parametrize("extra", [
    {SESSION.incarnation: {"S": ""}}, {SESSION.incarnation: {"S": "i" * 65}},
    {SESSION.incarnation: {"S": "in#c"}}, {SESSION.state: {"S": "ASLEEP"}},
    {SESSION.expires_at_ms: None}, {SESSION.expires_at_ms: {"N": "-1"}},
    {SESSION.expires_at_ms: {"N": str(MAX_TIMESTAMP_MS + 1)}},
    {SESSION.expires_at_ms: {"N": "soon"}}, {SESSION.pk: {"S": "w1"}}, {SESSION.pk: None},
])
def test_an_item_without_a_valid_incarnation_state_or_expiry_is_malformed(
        extra: dict[str, Any]) -> None:
    """A missing, too long or '#' incarnation, an unknown state, a missing or out-of-range
    expiry, a key that is no session's: MalformedItem."""
    raw = {k: v for k, v in session_raw(**extra).items() if v is not None}
    with pytest.raises(MalformedItem):
        SessionItem.from_ddb(raw)


@pytest.mark.parametrize(("value", "read"), [
    ("-1", 0), (str(MAX_TIMESTAMP_MS + 1), 0), ("x", 0), ("0", 0), (str(MAX_TIMESTAMP_MS),
                                                                     MAX_TIMESTAMP_MS)])
def test_a_mistyped_or_negative_record_reads_as_not_recorded(value: str, read: int) -> None:
    """heartbeat, counts and times out of range read as 0; a reaped mark of 0 is not reaped;
    an odd version or drain flag is none; an expiry of 0 or the largest timestamp is read."""
    item = SessionItem.from_ddb(session_raw(**{
        SESSION.heartbeat_at_ms: {"N": value}, SESSION.reaped_at_ms: {"N": value},
        SESSION.worker_version: {"S": "bad version!"}, SESSION.draining: {"BOOL": "true"}}))
    assert item.heartbeat_at_ms == read and item.reaped is (read > 0) and item.version == ""
    assert item.draining is False
    if value in ("0", str(MAX_TIMESTAMP_MS)):
        assert SessionItem.from_ddb(session_raw(**{
            SESSION.expires_at_ms: {"N": value}})).expires_at_ms == read


def test_an_owner_names_worker_and_incarnation_and_each_incarnation_is_new() -> None:
    """A session's and an item's owner is 'worker#incarnation'; new_incarnation is 12 random
    hex digits, a new one each time."""
    assert ALIVE.owner == Session("w1", "inc", 10_000).owner == "w1#inc"
    first, second = new_incarnation(), new_incarnation()
    assert len(first) == 12 and int(first, 16) >= 0 and first != second


def test_what_an_item_does_not_say_defaults_to_not_recorded() -> None:
    """Constructed with the required fields only: no heartbeat, nothing held, no capacity, not
    reaped, not draining, still ALIVE, no version; a beat is not draining by default."""
    assert (ALIVE.heartbeat_at_ms, ALIVE.held, ALIVE.capacity, ALIVE.started_at_ms,
            ALIVE.ended_at_ms) == (0, 0, 0, 0, 0)
    assert ALIVE.orders == frozenset() and ALIVE.load is None and ALIVE.directive is None
    assert not ALIVE.reaped and not ALIVE.draining and ALIVE.version == ""
    assert Beat(Session("w1", "inc", 10_000), frozenset()).draining is False


def test_as_dead_is_the_same_item_declared_dead() -> None:
    """as_dead: the item with state DEAD, everything else unchanged."""
    item = dataclasses.replace(ALIVE, held=3, heartbeat_at_ms=9_000)
    assert item.as_dead() == dataclasses.replace(item, state=SessionState.DEAD)
