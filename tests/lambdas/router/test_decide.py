"""The router's pure decision, case by case (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.liveness import Liveness, owner_liveness
from holdfast.core.nudge import MAX_URL_CHARS, URL_FRESH_MS, Nudge
from holdfast.core.orders import Order
from holdfast.core.schema import SessionState
from holdfast.core.sessions import SessionItem
from holdfast.lambdas.router.decide import Outcome, Reason, decide
from tests.lambdas.records import image

NOW = 1_764_460_800_000
SKEW = 1_000
C = "meeting-42"
LIVE = NOW + 15_000

STARTED_FREE = image(C, expires=0, epoch=3, status="RELEASED")
HELD = image(C, owner="w1", expires=LIVE, epoch=3, status="RUNNING", last_seq=7)
SESSION_OWNER = "w-7#a1b2c3"  # schema.owner_for(worker id, incarnation)
BACKSTOP = NOW + 3_600_000  # a session-held stream's long lease
SESSION_HELD = image(C, owner=SESSION_OWNER, expires=BACKSTOP, epoch=3, status="RUNNING")

# (case, event name, old image, new image, outcome, reason, delay_s, normalise)
CASES: list[tuple[str, str, Any, Any, Outcome, Reason, int, bool]] = [
    ("insert STARTED", "INSERT", None, image(C, expires=0), Outcome.NUDGE, Reason.INSERTED, 0,
     False),
    ("insert seed schema (no expiry)", "INSERT", None, image(C), Outcome.NUDGE,
     Reason.INSERTED, 0, True),
    ("insert STOPPED", "INSERT", None, image(C, state="STOPPED"), Outcome.SKIP,
     Reason.NOT_STARTED, 0, False),
    ("insert already owned (restore)", "INSERT", None, HELD, Outcome.SKIP, Reason.OWNED, 0,
     False),
    ("insert with NULL owner", "INSERT", None,
     image(C, expires=0, lease_owner={"NULL": True}), Outcome.NUDGE, Reason.INSERTED, 0, False),
    ("heartbeat", "MODIFY", HELD, image(C, owner="w1", expires=LIVE + 5_000, epoch=3,
                                         status="RUNNING", last_seq=7),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("checkpoint", "MODIFY", HELD, image(C, owner="w1", expires=LIVE + 5_000, epoch=3,
                                          status="RUNNING", last_seq=99),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("acquire", "MODIFY", STARTED_FREE, image(C, owner="w2", expires=LIVE, epoch=4,
                                               status="RUNNING"),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("takeover of an expired lease", "MODIFY", image(C, owner="w1", expires=NOW - 9_000, epoch=3),
     image(C, owner="w2", expires=LIVE, epoch=4), Outcome.SKIP, Reason.OWNED, 0, False),
    ("release", "MODIFY", HELD, image(C, expires=0, epoch=3, status="RELEASED", last_seq=9),
     Outcome.NUDGE, Reason.RELEASED, 0, False),
    ("release of a rebalancing move (moved_at_ms stamped)", "MODIFY",
     image(C, owner="w1", expires=LIVE, epoch=3, status="RUNNING", moved_at_ms={"N": "5"}),
     image(C, expires=0, epoch=3, status="RELEASED", moved_at_ms={"N": str(NOW)}),
     Outcome.NUDGE, Reason.MOVED, 0, False),
    ("release of a stream moved once before (moved_at_ms unchanged)", "MODIFY",
     image(C, owner="w1", expires=LIVE, epoch=3, status="RUNNING", moved_at_ms={"N": "5"}),
     image(C, expires=0, epoch=3, status="RELEASED", moved_at_ms={"N": "5"}),
     Outcome.NUDGE, Reason.RELEASED, 0, False),
    ("give-up with retry in 30 s", "MODIFY", HELD,
     image(C, expires=NOW + 30_000, epoch=3, status="BACKOFF"),
     Outcome.NUDGE, Reason.GAVE_UP, 31, False),
    ("give-up with retry in 0.5 s", "MODIFY", HELD,
     image(C, expires=NOW + 500, epoch=3, status="BACKOFF"), Outcome.NUDGE, Reason.GAVE_UP, 2,
     False),
    ("give-up whose retry time passed", "MODIFY", HELD,
     image(C, expires=NOW - 5_000, epoch=3, status="BACKOFF"), Outcome.NUDGE, Reason.GAVE_UP, 0,
     False),
    ("give-up without retry time", "MODIFY", HELD, image(C, expires=0, epoch=3, status="BACKOFF"),
     Outcome.NUDGE, Reason.GAVE_UP, 0, False),
    ("give-up beyond SQS's 15 min delay", "MODIFY", HELD,
     image(C, expires=NOW + 20 * 60_000, epoch=3, status="BACKOFF"),
     Outcome.SKIP, Reason.DEFERRED, 0, False),
    ("quarantine by its holder", "MODIFY", HELD,
     image(C, expires=NOW + 300_000, epoch=3, status="INVALID"),
     Outcome.NUDGE, Reason.QUARANTINED, 301, False),
    ("STOPPED -> STARTED", "MODIFY", image(C, state="STOPPED", expires=0, epoch=3),
     image(C, expires=0, epoch=3), Outcome.NUDGE, Reason.STARTED, 0, False),
    ("STOPPED -> STARTED without expiry", "MODIFY", image(C, state="STOPPED"), image(C),
     Outcome.NUDGE, Reason.STARTED, 0, True),
    ("STOPPED -> STARTED, plain owner's lease still running", "MODIFY",
     image(C, state="STOPPED", owner="w1", expires=LIVE, epoch=3), HELD,
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("STOPPED -> STARTED, plain owner's lease expired", "MODIFY",
     image(C, state="STOPPED", owner="w1", expires=NOW - 5_000, epoch=3),
     image(C, owner="w1", expires=NOW - 5_000, epoch=3),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("STOPPED -> STARTED, plain owner's lease beyond SQS's delay", "MODIFY",
     image(C, state="STOPPED", owner="w1", expires=NOW + 3_600_000, epoch=3),
     image(C, owner="w1", expires=NOW + 3_600_000, epoch=3),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("STOPPED -> STARTED, session owner", "MODIFY",
     image(C, state="STOPPED", owner=SESSION_OWNER, expires=BACKSTOP, epoch=3),
     image(C, owner=SESSION_OWNER, expires=BACKSTOP, epoch=3),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("STOPPED -> STARTED, session owner's lease expired", "MODIFY",
     image(C, state="STOPPED", owner=SESSION_OWNER, expires=NOW - 5_000, epoch=3),
     image(C, owner=SESSION_OWNER, expires=NOW - 5_000, epoch=3),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("STOPPED -> STARTED, owned, expiry 0", "MODIFY",
     image(C, state="STOPPED", owner=SESSION_OWNER, expires=0, epoch=3),
     image(C, owner=SESSION_OWNER, expires=0, epoch=3),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("STOPPED -> STARTED, owned, no expiry", "MODIFY",
     image(C, state="STOPPED", owner=SESSION_OWNER, epoch=3),
     image(C, owner=SESSION_OWNER, epoch=3),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("STOPPED -> STARTED, owner with an impossible worker id", "MODIFY",
     image(C, state="STOPPED", owner="bad id#abc", expires=LIVE, epoch=3),
     image(C, owner="bad id#abc", expires=LIVE, epoch=3),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("seed release: expiry 0, owner kept", "MODIFY", HELD,
     image(C, owner="w1", expires=0, epoch=3, status="RUNNING", last_seq=9),
     Outcome.ORDER, Reason.RELEASE, 0, False),
    ("forced handover of a session's stream", "MODIFY", SESSION_HELD,
     image(C, owner=SESSION_OWNER, expires=0, epoch=3, status="RUNNING"),
     Outcome.ORDER, Reason.RELEASE, 0, False),
    ("expiry 0 written where there was none", "MODIFY", image(C, owner="w1", epoch=3),
     image(C, owner="w1", expires=0, epoch=3), Outcome.ORDER, Reason.RELEASE, 0, False),
    ("expiry 0, old image missing", "MODIFY", None, image(C, owner="w1", expires=0, epoch=3),
     Outcome.ORDER, Reason.RELEASE, 0, False),
    ("insert owned with expiry 0", "INSERT", None, image(C, owner="w1", expires=0, epoch=3),
     Outcome.ORDER, Reason.RELEASE, 0, False),
    ("later write to an item freed by the same owner", "MODIFY",
     image(C, owner="w1", expires=0, epoch=3, last_seq=9),
     image(C, owner="w1", expires=0, epoch=3, last_seq=9, ws_url="wss://o.test/"),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("freed item named to another owner", "MODIFY", image(C, owner="w1", expires=0, epoch=3),
     image(C, owner="w2", expires=0, epoch=3), Outcome.ORDER, Reason.RELEASE, 0, False),
    ("session heartbeat-era checkpoint", "MODIFY", SESSION_HELD,
     image(C, owner=SESSION_OWNER, expires=BACKSTOP, epoch=3, status="RUNNING", last_seq=99),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("claim of a freed item", "MODIFY", image(C, owner="w1", expires=0, epoch=3),
     image(C, owner="w2", expires=LIVE, epoch=4, status="RUNNING"),
     Outcome.SKIP, Reason.OWNED, 0, False),
    ("STARTED -> STOPPED", "MODIFY", HELD,
     image(C, state="STOPPED", owner="w1", expires=LIVE, epoch=3),
     Outcome.ORDER, Reason.STOP, 0, False),
    ("STOPPED edited while still held", "MODIFY",
     image(C, state="STOPPED", owner="w1", expires=LIVE, epoch=3),
     image(C, state="STOPPED", owner="w1", expires=LIVE, epoch=3, ws_url="wss://o.test/"),
     Outcome.SKIP, Reason.NOT_STARTED, 0, False),
    ("release of a STOPPED item", "MODIFY", image(C, state="STOPPED", owner="w1", expires=LIVE),
     image(C, state="STOPPED", expires=0), Outcome.SKIP, Reason.NOT_STARTED, 0, False),
    ("normalisation write", "MODIFY", image(C), image(C, expires=0), Outcome.SKIP,
     Reason.NORMALISED, 0, False),
    ("edit of an unowned item", "MODIFY", STARTED_FREE,
     image(C, expires=0, epoch=3, status="RELEASED", ws_url="wss://other.example.test/"),
     Outcome.SKIP, Reason.UNCHANGED, 0, False),
    ("edit of an item never normalised", "MODIFY", image(C), image(C, ws_url="wss://o.test/"),
     Outcome.SKIP, Reason.UNCHANGED, 0, True),
    ("operator clears a back-off", "MODIFY",
     image(C, expires=NOW + 60_000, epoch=3, status="BACKOFF"),
     image(C, expires=0, epoch=3, status="BACKOFF"), Outcome.NUDGE, Reason.REARMED, 0, False),
    ("back-off already over, then edited", "MODIFY",
     image(C, expires=NOW - 60_000, epoch=3, status="BACKOFF"),
     image(C, expires=0, epoch=3, status="BACKOFF"), Outcome.SKIP, Reason.UNCHANGED, 0, False),
    ("old image malformed", "MODIFY", image(C, state="RUNNING!"), image(C, expires=0),
     Outcome.NUDGE, Reason.CHANGED, 0, False),
    ("old image missing", "MODIFY", None, image(C, expires=0), Outcome.NUDGE, Reason.CHANGED, 0,
     False),
    ("delete of a held stream", "REMOVE", HELD, None, Outcome.ORDER, Reason.STOP, 0, False),
    ("delete of a free stream", "REMOVE", STARTED_FREE, None, Outcome.SKIP, Reason.REMOVED, 0,
     False),
    ("new image malformed", "MODIFY", HELD, image(C, expires=0, ws_url=""), Outcome.MALFORMED,
     Reason.MALFORMED, 0, False),
    ("moto's key-only INSERT", "INSERT", None, {"Pk": {"S": f"CONN#{C}"}}, Outcome.MALFORMED,
     Reason.MALFORMED, 0, False),
    ("expiry of the wrong type", "INSERT", None,
     image(C, lease_expires_at_ms={"S": "soon"}), Outcome.MALFORMED, Reason.MALFORMED, 0, False),
    ("no new image", "MODIFY", HELD, None, Outcome.MALFORMED, Reason.MALFORMED, 0, False),
    ("unknown event name", "UPSERT", None, image(C, expires=0), Outcome.MALFORMED,
     Reason.MALFORMED, 0, False),
    # An app's PutItem of the whole item over a held stream: epoch and owner gone.
    ("put of the whole item over a holding", "MODIFY", HELD, image(C, expires=0),
     Outcome.ORDER, Reason.RETAKE, 0, False),
    ("put of the whole item, no expiry", "MODIFY", HELD, image(C), Outcome.ORDER,
     Reason.RETAKE, 0, True),
    ("put of the whole item, STOPPED", "MODIFY", HELD, image(C, state="STOPPED"),
     Outcome.ORDER, Reason.RETAKE, 0, False),
    ("put of the whole item, another URL", "MODIFY", HELD,
     image(C, expires=0, ws_url="wss://feeds.example.test/other"), Outcome.ORDER, Reason.STOP,
     0, False),
]


@pytest.mark.parametrize(("case", "event_name", "old", "new", "outcome", "reason", "delay_s",
                          "normalise"), CASES, ids=[c[0] for c in CASES])
def test_decision_table(case: str, event_name: str, old: Any, new: Any, outcome: Outcome,
                        reason: Reason, delay_s: int, normalise: bool) -> None:
    """Each kind of change gets the outcome, reason, delay and normalisation of the table."""
    d = decide(event_name, old, new, NOW, skew_ms=SKEW)
    assert (d.outcome, d.reason, d.delay_s, d.normalise) == (outcome, reason, delay_s, normalise)
    if outcome is not Outcome.MALFORMED or case != "moto's key-only INSERT":
        assert d.conn_id == C


def test_nudge_carries_epoch_and_reason() -> None:
    """A release's nudge names the connection, the reason and the epoch it saw."""
    d = decide("MODIFY", HELD, image(C, expires=0, epoch=3, status="RELEASED"), NOW)
    assert d.nudge() == Nudge(C, "released", 3, 0)


def test_skip_and_malformed_have_no_nudge() -> None:
    """Only a NUDGE outcome yields a message."""
    assert decide("MODIFY", HELD, HELD, NOW).nudge() is None
    assert decide("INSERT", None, {"Pk": {"S": "CONN#"}}, NOW).nudge() is None


def test_malformed_names_the_problem() -> None:
    """A malformed record's decision says which attribute is wrong."""
    d = decide("INSERT", None, image(C, epoch=None, lease_epoch={"N": "-4"}), NOW)
    assert d.outcome is Outcome.MALFORMED
    assert "lease_epoch" in d.detail


def test_hostile_key_is_not_echoed_unbounded() -> None:
    """A huge bogus key is cut short in the decision (it ends up in logs)."""
    d = decide("INSERT", None, {"Pk": {"S": "CONN#" + "x" * 10_000}}, NOW)
    assert d.outcome is Outcome.MALFORMED
    assert d.conn_id is not None and len(d.conn_id) <= 200


def test_delay_includes_skew() -> None:
    """A back-off nudge arrives no earlier than a challenger may acquire (expiry + skew)."""
    d = decide("MODIFY", HELD, image(C, expires=NOW + 10_000, epoch=3, status="BACKOFF"), NOW,
               skew_ms=2_500)
    assert d.delay_s == 13


def test_a_restart_with_an_owner_named_writes_nothing() -> None:
    """A restart that still names an owner is left to that owner's release (live) or to the
    sweeper's owner audit (gone): the router frees no owned stream."""
    d = decide("MODIFY", image(C, state="STOPPED", owner=SESSION_OWNER, expires=BACKSTOP,
                               epoch=3),
               SESSION_HELD, NOW)
    assert (d.outcome, d.acts) == (Outcome.SKIP, False)
    assert d.nudge() is None and d.order() is None


def _session(incarnation: str = "a1b2c3", state: SessionState = SessionState.ALIVE,
             expires: int = NOW + 4_000) -> SessionItem:
    return SessionItem("w-7", incarnation, state, expires)


LIVENESS: list[tuple[str, SessionItem | None, Liveness]] = [
    ("alive, within its TTL", _session(), Liveness.LIVE),
    ("alive, past its TTL but within the skew", _session(expires=NOW - 500), Liveness.LIVE),
    ("alive, silent past TTL + skew", _session(expires=NOW - 1_000), Liveness.SILENT),
    ("no session item", None, Liveness.UNKNOWN),
    ("replaced by another incarnation", _session("ffff"), Liveness.GONE),
    ("declared dead", _session(state=SessionState.DEAD), Liveness.GONE),
    ("ended (said goodbye)", _session(state=SessionState.ENDED), Liveness.GONE),
]


@pytest.mark.parametrize(("case", "session", "verdict"), LIVENESS, ids=[c[0] for c in LIVENESS])
def test_owner_liveness(case: str, session: SessionItem | None, verdict: Liveness) -> None:
    """A session keeps its stream only while ALIVE, same incarnation, within TTL + skew."""
    assert owner_liveness(SESSION_OWNER, session, NOW, SKEW)[0] is verdict


def test_plain_owner_has_no_live_session() -> None:
    """An owner without '#' names no session; owner_liveness never calls it live (the owner
    audit frees its stream once it has been unknown for TTL + skew)."""
    assert owner_liveness("w1", _session(), NOW, SKEW)[0] is Liveness.UNKNOWN


def test_an_inserted_nudge_carries_the_url_of_a_stream_that_may_connect_first() -> None:
    """A new item that is claimable now, unchecked and not limited to one connection is nudged
    with its URL (the worker connects without reading it); any other insert is not."""
    url = "wss://feeds.example.test/new"
    for fit in (image(C, expires=0, ws_url=url),
                image(C, expires=0, ws_url=url, single_connection={"BOOL": False})):
        nudge = decide("INSERT", None, fit, NOW, skew_ms=SKEW).nudge()
        assert nudge is not None and (nudge.reason, nudge.ws_url) == ("inserted", url)
    unfit = {
        "checkpointed": image(C, expires=0, last_seq=5),
        "single connection": image(C, expires=0, single_connection={"BOOL": True}),
        "backing off": image(C, expires=NOW + 30_000),
        "url too long": image(C, expires=0, ws_url="wss://h.test/" + "x" * 2_100)}
    for case, new in unfit.items():
        nudge = decide("INSERT", None, new, NOW, skew_ms=SKEW).nudge()
        assert nudge is not None and nudge.ws_url is None, case
    changed = decide("MODIFY", image(C, state="STOPPED"), image(C, expires=0, ws_url=url), NOW,
                     skew_ms=SKEW).nudge()
    assert changed is not None and changed.ws_url is None


@pytest.mark.parametrize("event_name", ["INSERT", "MODIFY", "REMOVE"])
@pytest.mark.parametrize("bad", [["x"], "CONN#a", 5])
def test_an_image_that_is_not_a_map_is_malformed(event_name: str, bad: Any) -> None:
    """A record whose image is a list, string or number is that record's malformed verdict,
    never an exception that fails the batch."""
    for old, new in ((bad, HELD), (HELD, bad)):
        d = decide(event_name, old, new, NOW)
        assert d.outcome is Outcome.MALFORMED and "not a map" in d.detail


def test_a_late_or_retried_insert_is_nudged_without_its_url() -> None:
    """An INSERT record read more than a minute after its write (a lagging shard, a batch
    retried again and again) is nudged, but without the URL: its stream may be held already."""
    url = "wss://feeds.example.test/new"
    new = image(C, expires=0, ws_url=url)
    for created, carried in ((NOW - 1_500, url), (NOW - 60_500, url), (NOW - 62_000, None),
                             (NOW - 600_000, None), (None, url)):
        nudge = decide("INSERT", None, new, NOW, skew_ms=SKEW, created_ms=created).nudge()
        assert nudge is not None and nudge.ws_url == carried, created


@pytest.mark.parametrize("bad", [
    {"ws_url": {"S": ""}}, {"ws_url": {"S": "wss://h.test/" + "x" * 5_000}},
    {"status": {"S": "R" * 65}}, {"lease_expires_at_ms": {"S": "soon"}},
    {"lease_epoch": {"S": "three"}}])
def test_a_held_item_deleted_or_stopped_with_a_malformed_image_still_orders_its_stop(
        bad: dict[str, Any]) -> None:
    """A REMOVE, or a MODIFY to STOPPED, of an item that names an owner but breaks the schema
    elsewhere: the owner is told to stop (the raw epoch if it is a number), counted as
    malformed; without an owner it stays a skip."""
    held = {**image(C, owner="w1", expires=LIVE, epoch=3, status="RUNNING"), **bad}
    epoch = None if "lease_epoch" in bad else 3
    removed = decide("REMOVE", held, None, NOW)
    stopped = decide("MODIFY", HELD, {**held, "desired_state": {"S": "STOPPED"}}, NOW)
    for d in (removed, stopped):
        assert (d.outcome, d.reason, d.owner, d.epoch, d.malformed) == (
            Outcome.ORDER, Reason.STOP, "w1", epoch, True)
    unowned = {k: v for k, v in held.items() if k != "lease_owner"}
    assert decide("REMOVE", unowned, None, NOW).outcome is Outcome.SKIP
    assert decide("MODIFY", HELD, held, NOW).outcome is Outcome.MALFORMED  # still STARTED


def test_an_overwrite_orders_its_holder_to_take_it_back() -> None:
    """The decision is an order to the holder under its epoch, and no nudge."""
    d = decide("MODIFY", HELD, image(C, expires=0), NOW)
    assert d.nudge() is None and d.acts and d.owner == "w1"
    assert d.order() == Order("retake", C, 3)


def test_an_overwrite_holds_the_stream_out_of_claims_for_a_session_ttl() -> None:
    """A stream written over on its own URL is held until now + the session TTL (no worker
    claims it before its holder takes it back), STOPPED too (the app may start it again
    first); one on another URL or from a record read late (it could hold a stream released
    since) is not."""
    fresh = {"skew_ms": SKEW, "lease_ms": 4_000, "created_ms": NOW - 1_000}
    for written in (image(C, expires=0), image(C), image(C, state="STOPPED")):
        assert decide("MODIFY", HELD, written, NOW, **fresh).hold_until_ms == NOW + 4_000
    other_url = image(C, expires=0, ws_url="wss://feeds.example.test/other")
    assert decide("MODIFY", HELD, other_url, NOW, **fresh).hold_until_ms is None
    late = decide("MODIFY", HELD, image(C), NOW, skew_ms=SKEW, lease_ms=4_000,
                  created_ms=NOW - 600_000)
    assert (late.hold_until_ms, late.normalise, late.reason) == (None, True, Reason.RETAKE)
    assert decide("MODIFY", STARTED_FREE, image(C, expires=0), NOW).hold_until_ms is None


def test_an_item_held_for_a_take_back_and_written_again_is_held_again() -> None:
    """Held for its holder's take-back (no owner, no status, expiry to come) and written
    again with expiry 0, STARTED or from STOPPED: no nudge, held until the same end; a
    back-off cleared (it has a status) is still rearmed."""
    hold = NOW + 3_000
    for held in (image(C, expires=hold), image(C, state="STOPPED", expires=hold)):
        d = decide("MODIFY", held, image(C, expires=0), NOW, skew_ms=SKEW)
        assert (d.outcome, d.reason, d.hold_until_ms, d.nudge()) == (
            Outcome.SKIP, Reason.HELD, hold, None)
    backoff = image(C, expires=hold, status="BACKOFF")
    assert decide("MODIFY", backoff, image(C, expires=0, status="BACKOFF"), NOW,
                  skew_ms=SKEW).reason is Reason.REARMED


def test_a_handoff_release_nudges_its_successor_and_a_give_up_does_not() -> None:
    """A release that names a successor is a "handoff" nudge carrying it, delayed to the
    hold's end; a give-up that still names one is a plain "gave_up" without it."""
    successor = {"S": "w-9#ffff"}
    d = decide("MODIFY", HELD, image(C, expires=NOW + 5_000, epoch=3, status="RELEASED",
                                     successor=successor), NOW, skew_ms=SKEW)
    assert (d.outcome, d.reason, d.delay_s, d.successor) == (
        Outcome.NUDGE, Reason.HANDOFF, 6, "w-9#ffff")
    gave_up = decide("MODIFY", HELD, image(C, expires=NOW + 5_000, epoch=3, status="BACKOFF",
                                           successor=successor), NOW, skew_ms=SKEW)
    assert (gave_up.reason, gave_up.successor) == (Reason.GAVE_UP, None)


def test_a_stopped_item_that_names_an_owner_with_no_old_state_orders_its_stop() -> None:
    """An INSERT (or a MODIFY with a malformed old image) of a STOPPED item naming an owner
    orders that owner to stop; it never raises."""
    stopped = image(C, state="STOPPED", owner="w1", expires=LIVE, epoch=3)
    for event_name, old in (("INSERT", None), ("MODIFY", image(C, state="RUNNING!"))):
        d = decide(event_name, old, stopped, NOW, skew_ms=SKEW)
        assert (d.outcome, d.reason, d.owner, d.epoch) == (Outcome.ORDER, Reason.STOP, "w1", 3)


def test_a_remove_without_an_old_image_is_skipped() -> None:
    """A REMOVE record that carries no old image is a skip, never an exception."""
    d = decide("REMOVE", None, None, NOW)
    assert (d.outcome, d.reason, d.conn_id) == (Outcome.SKIP, Reason.REMOVED, None)


def test_a_held_item_written_again_without_an_expiry_is_held_again() -> None:
    """Held for its holder's take-back and written over again without any expiry (an app's
    second PutItem): held until the same end, never an exception."""
    hold = NOW + 3_000
    d = decide("MODIFY", image(C, expires=hold), image(C), NOW, skew_ms=SKEW)
    assert (d.outcome, d.reason, d.hold_until_ms) == (Outcome.SKIP, Reason.HELD, hold)


def test_a_write_naming_an_owner_or_a_status_over_a_held_item_is_not_held() -> None:
    """Over an item held for its holder's take-back, a write that names an owner is that
    owner's (expiry 0: told to release) and one that sets a status is the protocol's (a
    back-off cleared: rearmed): neither is held."""
    held = image(C, expires=NOW + 3_000)
    owned = decide("MODIFY", held, image(C, owner="w1", expires=0, epoch=3), NOW, skew_ms=SKEW)
    assert (owned.outcome, owned.reason, owned.hold_until_ms) == (
        Outcome.ORDER, Reason.RELEASE, None)
    cleared = decide("MODIFY", held, image(C, expires=0, status="BACKOFF"), NOW, skew_ms=SKEW)
    assert (cleared.outcome, cleared.reason, cleared.hold_until_ms) == (
        Outcome.NUDGE, Reason.REARMED, None)


def test_an_edit_that_leaves_a_back_off_running_is_not_rearmed() -> None:
    """An unowned item whose back-off is extended (or edited while it runs) gets no nudge:
    only an edit that makes it claimable is "rearmed"."""
    backoff = image(C, expires=NOW + 60_000, epoch=3, status="BACKOFF")
    for expires in (NOW + 60_000, NOW + 120_000):
        d = decide("MODIFY", backoff, image(C, expires=expires, epoch=3, status="BACKOFF"), NOW,
                   skew_ms=SKEW)
        assert (d.outcome, d.reason, d.nudge()) == (Outcome.SKIP, Reason.UNCHANGED, None)


@pytest.mark.parametrize(("raw_epoch", "epoch"), [
    (-1, None), (0, 0), (10**18 - 1, 10**18 - 1), (10**18, None)])
def test_a_malformed_deleted_item_orders_its_stop_with_an_epoch_only_in_range(
        raw_epoch: int, epoch: int | None) -> None:
    """A stop built from a deleted, malformed image's raw attributes carries its epoch only
    if it is in 0..10**18 - 1, and says why in its detail."""
    held = {**image(C, owner="w1", expires=LIVE, status="RUNNING"),
            "lease_epoch": {"N": str(raw_epoch)}, "ws_url": {"S": ""}}
    d = decide("REMOVE", held, None, NOW)
    assert (d.outcome, d.reason, d.owner, d.epoch, d.malformed) == (
        Outcome.ORDER, Reason.STOP, "w1", epoch, True)
    assert d.detail.startswith("malformed image, deleted")


def test_a_malformed_deleted_item_is_stopped_under_its_whole_id_and_only_when_addressable(
        ) -> None:
    """A malformed image's stop names the full id of a 200-character connection and an owner
    as long as a lease may name; one whose owner is a huge bogus string, or whose key is not
    a valid connection id (none, or too long: cut, it would name another stream), orders
    nothing."""
    long_id = "c" * 200
    bad = {"ws_url": {"S": ""}}
    d = decide("REMOVE", {**image(long_id, owner="w1", expires=LIVE, epoch=3), **bad}, None,
               NOW)
    assert (d.outcome, d.conn_id, d.owner) == (Outcome.ORDER, long_id, "w1")
    longest_owner = f"{'w' * 200}#0123456789ab"  # a 200-character worker id's session
    d = decide("REMOVE", {**image(C, owner=longest_owner, expires=LIVE, epoch=3), **bad}, None,
               NOW)
    assert (d.outcome, d.owner) == (Outcome.ORDER, longest_owner)
    hostile = {**image(C, owner="w" * 10_000, expires=LIVE, epoch=3), **bad}
    unkeyed = {**image(C, owner="w1", expires=LIVE, epoch=3), **bad, "Pk": {"S": "bogus"}}
    # Cut to 200 characters this key would name the 200-character stream and stop it.
    too_long = {**image(long_id + "x" * 50, owner="w1", expires=LIVE, epoch=3), **bad}
    for old in (hostile, unkeyed, too_long):
        d = decide("REMOVE", old, None, NOW)
        assert (d.outcome, d.reason, d.order()) == (Outcome.SKIP, Reason.REMOVED, None)


def test_an_insert_read_exactly_at_the_freshness_bound_still_carries_its_url() -> None:
    """A record read a minute plus the URL's freshness after its write still carries the
    URL; one a millisecond later does not."""
    url = "wss://feeds.example.test/new"
    bound = 60_000 + URL_FRESH_MS
    for created, carried in ((NOW - bound, url), (NOW - bound + 1, url),
                             (NOW - bound - 1, None)):
        nudge = decide("INSERT", None, image(C, expires=0, ws_url=url), NOW, skew_ms=SKEW,
                       created_ms=created).nudge()
        assert nudge is not None and nudge.ws_url == carried, created


def test_an_inserted_url_of_the_longest_length_a_worker_accepts_is_carried() -> None:
    """A URL of exactly MAX_URL_CHARS characters (the worker's own bound) is carried; one
    character more is not."""
    for extra, carried in ((0, True), (1, False)):
        url = "wss://h.test/" + "x" * (MAX_URL_CHARS - len("wss://h.test/") + extra)
        nudge = decide("INSERT", None, image(C, expires=0, ws_url=url), NOW,
                       skew_ms=SKEW).nudge()
        assert nudge is not None and (nudge.ws_url == url) is carried
