"""Session directives (target, drain) on DynamoDB Local, and their order-queue bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from holdfast.core.directives import Directive, drain_body, parse_inbox_body
from holdfast.core.nudge import REASON_HANDOFF, Nudge
from holdfast.core.schema import SESSION, SessionState, owner_for, session_pk_for
from holdfast.core.sessions import SessionItem, SessionStore
from holdfast.localaws import LocalAws
from tests.conftest import client_for
from tests.core.test_store import Clock

TTL_MS = 8_000
SKEW_MS = 1_000
OWNER = "w-1#abc123"


@pytest.fixture
def ddb(ddb_local: LocalAws) -> Any:
    return client_for(ddb_local, "dynamodb")


@pytest.fixture
def sessions(ddb_local: LocalAws, ddb: Any, clock: Clock) -> SessionStore:
    return SessionStore(ddb, ddb_local.session_table, ddb_local.table, ttl_ms=TTL_MS,
                        skew_ms=SKEW_MS, clock=clock)


def target(clock: Clock, **kw: Any) -> Directive:
    args: dict[str, Any] = {"share": 12.0, "ceiling": 13.5, "shed_at_once": 3,
                            "until_ms": clock.now + 30_000, "fleet": 4, **kw}
    return Directive(**args)


# -- the session item --------------------------------------------------------------------------
def test_a_directive_comes_back_with_the_next_heartbeat(sessions: SessionStore, clock: Clock,
                                                         unique_id: str) -> None:
    """set_directive on a live session: the next heartbeat_full returns it (and get too)."""
    s = sessions.start(unique_id, capacity=50)
    beat = sessions.heartbeat_full(s, held=20, capacity=50)
    assert beat.directive is None and beat.draining is False
    d = target(clock, share=12.25, issued_ms=clock.now)
    assert sessions.set_directive(s.owner, d)
    clock.now += 1_000
    beat = sessions.heartbeat_full(beat.session, held=20, capacity=50, load=20.5)
    assert beat.directive == d and beat.draining is False
    assert beat.session.expires_at_ms == clock.now + TTL_MS
    item = sessions.get(unique_id)
    assert item is not None and item.directive == d and item.load == 20.5


def test_a_newer_directive_replaces_the_old(sessions: SessionStore, clock: Clock,
                                            unique_id: str) -> None:
    """Directives are absolute: the last one written is the one the worker reads."""
    s = sessions.start(unique_id, capacity=50)
    assert sessions.set_directive(s.owner, target(clock))
    newer = target(clock, share=7.0, ceiling=7.0, shed_at_once=0, fleet=9)
    assert sessions.set_directive(s.owner, newer)
    assert sessions.heartbeat_full(s, held=9, capacity=50).directive == newer


def test_a_stale_incarnation_is_refused(sessions: SessionStore, clock: Clock,
                                        unique_id: str) -> None:
    """A directive for another incarnation (or a predecessor) is not written: False."""
    s = sessions.start(unique_id, capacity=5)
    assert not sessions.set_directive(owner_for(unique_id, "other"), target(clock))
    assert not sessions.set_draining(owner_for(unique_id, "other"), True)
    clock.now += TTL_MS + SKEW_MS + 1
    new = sessions.start(unique_id, capacity=5)
    assert not sessions.set_directive(s.owner, target(clock))
    assert not sessions.set_draining(s.owner, True)
    beat = sessions.heartbeat_full(new, held=0, capacity=5)
    assert beat.directive is None and beat.draining is False


@pytest.mark.parametrize("owner", ["no-session-here", "#abc", "w#", "bad id!#abc"])
def test_an_owner_without_a_session_is_refused(sessions: SessionStore, clock: Clock,
                                               owner: str) -> None:
    """An owner that names no session (or an invalid worker id) gets False, not an error."""
    assert not sessions.set_directive(owner, target(clock))
    assert not sessions.set_draining(owner, True)


def test_a_missing_session_is_refused(sessions: SessionStore, clock: Clock,
                                      unique_id: str) -> None:
    """No session item at all: the conditional write fails, False, and nothing is created."""
    assert not sessions.set_directive(owner_for(unique_id, "abc"), target(clock))
    assert sessions.get(unique_id) is None


def test_an_ended_session_is_refused(sessions: SessionStore, clock: Clock,
                                     unique_id: str) -> None:
    """After the goodbye (ENDED) neither a target nor a drain lands."""
    s = sessions.start(unique_id, capacity=5)
    assert sessions.end(s)
    assert not sessions.set_directive(s.owner, target(clock))
    assert not sessions.set_draining(s.owner, True)
    item = sessions.get(unique_id)
    assert item is not None and item.state is SessionState.ENDED
    assert item.directive is None and item.draining is False


def test_a_dead_session_is_refused(sessions: SessionStore, clock: Clock,
                                   unique_id: str) -> None:
    """A session declared DEAD gets no target and no drain."""
    s = sessions.start(unique_id, capacity=5)
    clock.now += TTL_MS + SKEW_MS + 1
    item = sessions.get(unique_id)
    assert item is not None and sessions.mark_dead(item)
    assert not sessions.set_directive(s.owner, target(clock))
    assert not sessions.set_draining(s.owner, True)
    item = sessions.get(unique_id)
    assert item is not None and item.state is SessionState.DEAD
    assert item.directive is None and item.draining is False


def test_draining_round_trips(sessions: SessionStore, clock: Clock, unique_id: str) -> None:
    """set_draining True then False: heartbeat_full and get see each, the target untouched."""
    s = sessions.start(unique_id, capacity=5)
    d = target(clock)
    assert sessions.set_directive(s.owner, d)
    assert sessions.set_draining(s.owner, True)
    beat = sessions.heartbeat_full(s, held=3, capacity=5)
    assert beat.draining is True and beat.directive == d
    item = sessions.get(unique_id)
    assert item is not None and item.draining is True
    assert sessions.set_draining(s.owner, False)
    beat = sessions.heartbeat_full(beat.session, held=3, capacity=5)
    assert beat.draining is False and beat.directive == d
    item = sessions.get(unique_id)
    assert item is not None and item.draining is False
    assert sessions.set_draining(s.owner, False)  # cancelling twice is fine


# -- order-queue bodies --------------------------------------------------------------------
directives = st.builds(
    Directive,
    share=st.floats(min_value=0, max_value=1e6, allow_nan=False) | st.integers(0, 10**6),
    ceiling=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    shed_at_once=st.integers(min_value=0, max_value=10**6),
    until_ms=st.integers(min_value=0, max_value=10**13),
    fleet=st.integers(min_value=0, max_value=10**4),
    issued_ms=st.integers(min_value=0, max_value=10**13),
    successors=st.lists(st.tuples(st.from_regex(r"w-[a-z0-9]{1,8}#[a-f0-9]{6}", fullmatch=True),
                                  st.integers(1, 10**6)), max_size=4).map(tuple),
)


@settings(max_examples=200)
@given(directives)
def test_a_directive_body_round_trips(d: Directive) -> None:
    """parse_inbox_body(d.body(owner), owner) is d again, for its own owner only."""
    body = d.body(OWNER)
    assert parse_inbox_body(body, OWNER) == d
    assert parse_inbox_body(body, "w-2#abc123") is None


@settings(max_examples=200)
@given(directives)
def test_a_directive_round_trips_through_item_attributes(d: Directive) -> None:
    """from_item(attributes()) is d, up to the 6 significant digits of a fractional number."""
    back = Directive.from_item(d.attributes())
    assert back is not None
    assert (back.shed_at_once, back.until_ms, back.fleet, back.issued_ms, back.successors) == (
        d.shed_at_once, d.until_ms, d.fleet, d.issued_ms, d.successors)
    for x, y in ((back.share, d.share), (back.ceiling, d.ceiling)):
        assert x == pytest.approx(y, rel=1e-5)


def test_whole_numbers_are_written_without_a_fraction() -> None:
    """Directive.number: 12.0 as "12", 13.5 as "13.5"."""
    assert Directive.number(12.0) == {"N": "12"} and Directive.number(13.5) == {"N": "13.5"}


def test_drain_bodies_parse_to_the_flag() -> None:
    """drain_body(owner, flag) parses to exactly that bool, for that owner only."""
    assert parse_inbox_body(drain_body(OWNER, True), OWNER) is True
    assert parse_inbox_body(drain_body(OWNER, False), OWNER) is False
    assert parse_inbox_body(drain_body(OWNER, True), "w-1#other") is None


@pytest.mark.parametrize("body", [
    "", "not json", "[]", "null", "42", json.dumps({"directive": {}}),
    json.dumps({"owner": OWNER}),
    json.dumps({"owner": OWNER, "drain": "yes"}),
    json.dumps({"owner": OWNER, "directive": "share=1"}),
    json.dumps({"owner": OWNER, "directive": {"share": 1, "ceiling": 2, "shed_at_once": 1}}),
    json.dumps({"owner": OWNER, "directive": {"share": "1", "ceiling": 2, "shed_at_once": 1,
                                              "until_ms": 5}}),
    json.dumps({"owner": OWNER, "directive": {"share": True, "ceiling": 2, "shed_at_once": 1,
                                              "until_ms": 5}}),
    json.dumps({"owner": OWNER, "directive": {"share": -1, "ceiling": 2, "shed_at_once": 1,
                                              "until_ms": 5}}),
    '{"owner": "w-1#abc123", "directive": {"share": NaN, "ceiling": 2, "shed_at_once": 1,'
    ' "until_ms": 5}}',
    '{"owner": "w-1#abc123", "directive": {"share": Infinity, "ceiling": 2,'
    ' "shed_at_once": 1, "until_ms": 5}}',
    json.dumps({"owner": "w-1#abc1234", "drain": True}),
    json.dumps({"owner": ["w-1#abc123"], "drain": True}),
    "[" * 5000, '{"owner": "w-1#abc123", "order": ' + "[" * 5000,
])
def test_foreign_or_malformed_bodies_parse_to_none(body: str) -> None:
    """Not JSON, not an object, another owner, a missing, non-numeric, negative or
    non-finite field: None, never an exception."""
    assert parse_inbox_body(body, OWNER) is None


@settings(max_examples=200)
@given(st.text(max_size=200) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["owner", "drain", "directive", "share", "ceiling", "shed_at_once",
                         "until_ms", "fleet"]), inner, max_size=6),
    max_leaves=20).map(json.dumps))
def test_any_body_parses_without_raising(body: str) -> None:
    """Whatever arrives on the queue: a Directive, a bool or None, never an exception."""
    assert parse_inbox_body(body, OWNER) is None or isinstance(
        parse_inbox_body(body, OWNER), Directive | bool)


# -- parsing the item ------------------------------------------------------------------------
FULL = {SESSION.target_share: {"N": "12"}, SESSION.target_ceiling: {"N": "13.5"},
        SESSION.shed_at_once: {"N": "3"}, SESSION.target_until_ms: {"N": "1700000030000"},
        SESSION.fleet_size: {"N": "4"}, SESSION.target_issued_ms: {"N": "1700000000000"}}


def test_from_item_reads_a_full_directive() -> None:
    """All six attributes: the directive they say."""
    assert Directive.from_item(FULL) == Directive(12.0, 13.5, 3, 1_700_000_030_000, 4,
                                                  1_700_000_000_000)


@pytest.mark.parametrize("name", [SESSION.target_share, SESSION.target_ceiling,
                                  SESSION.shed_at_once, SESSION.target_until_ms])
@pytest.mark.parametrize("value", [None, {"N": "abc"}, {"S": "12"}, {"N": "-1"},
                                   {"N": "nan"}, {"N": "inf"}, {"N": "1e30"}, "12", {"N": 12}])
def test_from_item_with_a_missing_or_garbage_field_is_none(name: str, value: Any) -> None:
    """Any of the four required attributes missing, not a number, negative or absurd: None."""
    raw = {k: v for k, v in FULL.items() if k != name}
    if value is not None:
        raw[name] = value
    assert Directive.from_item(raw) is None


@pytest.mark.parametrize("value", [None, {"N": "x"}, {"S": "4"}])
def test_from_item_without_fleet_size_or_issued_reads_zero(value: Any) -> None:
    """The fleet size and issued_ms are optional: missing or garbage read as 0."""
    raw = {k: v for k, v in FULL.items() if k not in (SESSION.fleet_size,
                                                       SESSION.target_issued_ms)}
    if value is not None:
        raw[SESSION.fleet_size] = raw[SESSION.target_issued_ms] = value
    assert Directive.from_item(raw) == Directive(12.0, 13.5, 3, 1_700_000_030_000, 0, 0)


def test_from_item_of_nothing_is_none() -> None:
    """An item with no directive attributes (a session never targeted) has none."""
    assert Directive.from_item({}) is None


def session_raw(**extra: Any) -> dict[str, Any]:
    return {SESSION.pk: {"S": session_pk_for("w-1")}, SESSION.incarnation: {"S": "abc123"},
            SESSION.state: {"S": SessionState.ALIVE}, SESSION.expires_at_ms: {"N": "1000"},
            **extra}


def test_session_item_reads_load_directive_and_draining() -> None:
    """SessionItem.from_ddb: load as a float, the directive, the drain flag."""
    item = SessionItem.from_ddb(session_raw(**FULL, **{SESSION.load: {"N": "20.5"},
                                                       SESSION.draining: {"BOOL": True}}))
    assert item.load == 20.5 and item.draining is True
    assert item.directive == Directive(12.0, 13.5, 3, 1_700_000_030_000, 4, 1_700_000_000_000)


@pytest.mark.parametrize("draining", [None, {"BOOL": False}, {"S": "true"}, {"N": "1"}, True])
def test_session_item_defaults_without_the_new_fields(draining: Any) -> None:
    """An item of a version before rebalancing (or with garbage in them): load None, no
    directive, not draining."""
    extra = {} if draining is None else {SESSION.draining: draining}
    item = SessionItem.from_ddb(session_raw(**extra, **{SESSION.load: {"N": "x"}}))
    assert item.load is None and item.directive is None and item.draining is False


@pytest.mark.parametrize("successors", [
    "not json", "{}", '[["w-1#abc123"]]', '[["w-1#abc123", "3"]]', '[["w-1#abc123", 0]]',
    '[["w-1#abc123", true]]', '[["no owner", 3]]', '[[3, "w-1#abc123"]]', "[" * 5000])
def test_malformed_successors_are_left_out(successors: str) -> None:
    """A successor entry that is not [session owner, positive count] is dropped, the rest of
    the directive stands (its streams then go to whoever has room)."""
    d = Directive.from_item({**FULL, SESSION.target_successors: {"S": successors}})
    assert d is not None and d.successors == () and d.share == 12


def test_a_handoff_nudge_on_the_order_queue_is_for_its_successor_only() -> None:
    """parse_inbox_body gives the Nudge to the owner it names, None to any other."""
    body = Nudge("c1", REASON_HANDOFF, 5, to=OWNER).body()
    assert parse_inbox_body(body, OWNER) == Nudge("c1", REASON_HANDOFF, 5, to=OWNER)
    assert parse_inbox_body(body, "w-2#abc123") is None
    assert parse_inbox_body(Nudge("c1", REASON_HANDOFF).body(), OWNER) is None
