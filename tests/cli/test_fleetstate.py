"""Pure fleet summaries: owners from live leases, unowned STARTED streams and their age."""

from __future__ import annotations

from holdfast.cli.fleetstate import fleet_status, stream_row
from holdfast.core.exceptions import MalformedItem
from holdfast.core.model import LeaseItem

NOW = 1_000_000


def item(cid: str, *, owner: str | None = None, exp: int | None = 0, state: str = "STARTED",
         status: str | None = None) -> LeaseItem:
    return LeaseItem(cid, state, "ws://h/s", owner, exp, 5, 1, status)


def test_live_leases_are_grouped_by_owner() -> None:
    """Only unexpired leases count as a worker's load."""
    st = fleet_status([item("a", owner="w1", exp=NOW + 10), item("b", owner="w1", exp=NOW + 10),
                       item("c", owner="w2", exp=NOW + 10)], NOW)
    assert st.workers == {"w1": 2, "w2": 1} and st.unowned_started == []


def test_expired_and_released_streams_are_unowned_with_age() -> None:
    """An expired lease's age counts from expiry; a released one's from its last write."""
    st = fleet_status([item("dead", owner="w1", exp=NOW - 3000), item("rel", exp=0)], NOW,
                      {"rel": NOW - 7000})
    assert st.unowned_started == ["dead", "rel"] and st.oldest_unowned_ms == 7000
    assert st.workers == {}


def test_stopped_backoff_and_malformed_are_apart() -> None:
    """STOPPED items are not unowned; BACKOFF ones waiting for retry are listed separately."""
    st = fleet_status([item("s", state="STOPPED"),
                       item("b", exp=NOW + 5000, status="BACKOFF"),
                       MalformedItem("CONN#x", "bad")], NOW)
    assert st.unowned_started == [] and st.backoff == ["b"] and st.malformed == ["CONN#x"]
    assert (st.started, st.stopped) == (1, 1)


def test_quarantined_and_handed_over_streams_are_not_unowned() -> None:
    """An item a claim parked as INVALID, and one released to a named successor within its
    hold, wait on purpose: listed apart, not as unowned aged 0 s; past their expiry they are
    unowned again."""
    parked = item("q", exp=NOW + 300_000, status="INVALID")
    handed = LeaseItem("h", "STARTED", "ws://h/s", None, NOW + 3000, 5, 1, "RELEASED",
                       successor="w2")
    st = fleet_status([parked, handed], NOW)
    assert st.unowned_started == [] and st.oldest_unowned_ms is None
    assert (st.quarantined, st.handing_over, st.backoff) == (["q"], ["h"], [])
    later = fleet_status([parked, handed], NOW + 400_000)
    assert later.unowned_started == ["h", "q"] and later.quarantined == []


def test_stream_row_shows_owner_only_while_live() -> None:
    """ls shows lease time left for a live lease and no owner for an expired one."""
    assert stream_row(item("a", owner="w", exp=NOW + 1500), NOW).lease_left_ms == 1500
    expired = stream_row(item("a", owner="w", exp=NOW - 1), NOW)
    assert expired.owner is None and expired.lease_left_ms is None


def test_session_rows_tell_alive_silent_and_dead_apart() -> None:
    """status lists live sessions first, and an ALIVE one past its expiry as SILENT."""
    from holdfast.cli.fleetstate import session_rows
    from holdfast.core.schema import SessionState
    from holdfast.core.sessions import SessionItem

    now = 1_000_000
    rows = session_rows([
        SessionItem("b", "i2", SessionState.ALIVE, now - 1, now - 9_000, 3, 10),
        SessionItem("a", "i1", SessionState.ALIVE, now + 5_000, now - 1_000, 4, 10),
        SessionItem("c", "i3", SessionState.DEAD, now - 20_000, now - 30_000, 2, 10),
    ], now)
    assert [(r.owner, r.state) for r in rows] == [("a#i1", "ALIVE"), ("b#i2", "SILENT"),
                                                  ("c#i3", "DEAD")]
    assert rows[0].expires_in_ms == 5_000 and rows[0].heartbeat_age_ms == 1_000


def test_a_session_within_the_skew_of_its_expiry_is_still_alive() -> None:
    """Past its expiry by less than the skew a session still holds its streams (``ls`` lists
    them as held): status does not call it SILENT until the skew has passed too."""
    from holdfast.cli.fleetstate import session_rows
    from holdfast.core.schema import SessionState
    from holdfast.core.sessions import SessionItem

    now = 1_000_000
    rows = session_rows([SessionItem("a", "i1", SessionState.ALIVE, now - 100, now - 1_100, 1, 10),
                         SessionItem("b", "i2", SessionState.ALIVE, now - 300, now - 1_300, 1, 10)],
                        now, skew_ms=250)
    assert [(r.owner, r.state) for r in rows] == [("a#i1", "ALIVE"), ("b#i2", "SILENT")]


def test_session_rows_show_draining_and_a_live_rebalancing_target() -> None:
    """status says which worker drains and which one a live target is moving (lapsed: not)."""
    from holdfast.cli.fleetstate import session_rows
    from holdfast.core.directives import Directive
    from holdfast.core.schema import SessionState
    from holdfast.core.sessions import SessionItem

    now = 1_000_000
    live, lapsed = Directive(5, 5, 1, now + 9_000, 2, now), Directive(7, 7, 1, now - 1, 2, now)
    rows = session_rows([
        SessionItem("a", "i1", SessionState.ALIVE, now + 5_000, now, 9, 10, directive=live),
        SessionItem("b", "i2", SessionState.ALIVE, now + 5_000, now, 1, 10, directive=lapsed,
                    draining=True),
    ], now)
    assert [(r.owner, r.target, r.draining) for r in rows] == [("a#i1", 5, False),
                                                               ("b#i2", None, True)]
    assert rows[0].to_json()["target"] == 5 and rows[1].to_json()["draining"] is True


def test_session_rows_show_the_worker_version() -> None:
    """status shows what each worker runs (None in JSON where it is not known)."""
    from holdfast.cli.fleetstate import session_rows
    from holdfast.core.schema import SessionState
    from holdfast.core.sessions import SessionItem

    now = 1_000_000
    rows = session_rows([
        SessionItem("a", "i1", SessionState.ALIVE, now + 5_000, now, 1, 10, version="wk:3"),
        SessionItem("b", "i2", SessionState.ALIVE, now + 5_000, now, 1, 10)], now)
    assert [r.to_json()["version"] for r in rows] == ["wk:3", None]


def test_status_counts_workers_and_streams_per_version() -> None:
    """Live sessions grouped by what they run: two versions at once is a deploy under way."""
    from holdfast.cli.fleetstate import FleetStatus, session_rows
    from holdfast.core.schema import SessionState
    from holdfast.core.sessions import SessionItem

    now = 1_000_000
    rows = session_rows([
        SessionItem("a", "i1", SessionState.ALIVE, now + 5_000, now, 30, 50, version="wk:3"),
        SessionItem("b", "i2", SessionState.ALIVE, now + 5_000, now, 20, 50, version="wk:4"),
        SessionItem("c", "i3", SessionState.ALIVE, now + 5_000, now, 10, 50, version="wk:4"),
        SessionItem("d", "i4", SessionState.DEAD, now - 5_000, now - 9_000, 5, 50,
                    version="wk:2")], now)
    st = FleetStatus({}, 60, 60, 0, [], [], [], sessions=rows)
    assert st.versions() == {"wk:3": (1, 30), "wk:4": (2, 30)}
    assert st.to_json()["versions"] == {"wk:3": {"workers": 1, "streams": 30},
                                        "wk:4": {"workers": 2, "streams": 30}}


def test_only_a_live_session_holds_and_its_time_left_is_the_sessions() -> None:
    """With the session items read, a stream is held only by a LIVE session (time left = the
    session's); silent, ended, replaced and unknown owners strand it, whatever its expiry."""
    from holdfast.core.schema import SessionState
    from holdfast.core.sessions import SessionItem

    backstop = NOW + 3_600_000
    sessions = {
        "live": SessionItem("live", "i1", SessionState.ALIVE, NOW + 4_000, NOW - 1_000),
        "quiet": SessionItem("quiet", "i2", SessionState.ALIVE, NOW - 3_000, NOW - 7_000),
        "gone": SessionItem("gone", "i3", SessionState.ENDED, NOW - 9_000, ended_at_ms=NOW - 8_000),
        "again": SessionItem("again", "new", SessionState.ALIVE, NOW + 4_000,
                             started_at_ms=NOW - 2_000),
    }
    items = [
        item(c, owner=o, exp=backstop) for c, o in
        (("a", "live#i1"), ("b", "quiet#i2"), ("c", "gone#i3"), ("d", "again#old"),
         ("e", "nobody#i9"), ("f", "not an owner"))]
    st = fleet_status([*items], NOW, sessions=sessions, skew_ms=1_000)
    assert st.workers == {"live#i1": 1} and st.unowned_started == ["b", "c", "d", "e", "f"]
    why = {r.conn_id: (r.reason.partition(":")[0], r.age_ms) for r in st.stranded}
    assert why == {"b": ("silent", 3_000), "c": ("gone", 8_000), "d": ("gone", 2_000),
                   "e": ("unknown", None), "f": ("unknown", None)}
    assert st.oldest_unowned_ms == 8_000
    row = stream_row(items[0], NOW, sessions=sessions)
    assert (row.owner, row.lease_left_ms, row.stranded) == ("live#i1", 4_000, None)
    row = stream_row(items[2], NOW, sessions=sessions)
    assert (row.owner, row.lease_left_ms, row.stranded) == ("gone#i3", None, "gone: session ENDED")


def test_a_stream_whose_owner_has_a_malformed_session_item_is_stranded_and_stuck() -> None:
    """A malformed session item (kept under its worker id) strands its owner's streams with the
    reason and as stuck: the sweeper cannot judge it, so nobody releases them until it is
    fixed or deleted (it read "unknown: no session item", which the sweeper releases)."""
    from holdfast.cli.fleetstate import sessions_by_worker

    bad = MalformedItem("WORKER#broken", "session_expires_at_ms is missing")
    sessions = sessions_by_worker([bad, MalformedItem("junk", "not a session item")])
    assert sessions == {"broken": bad}
    st = fleet_status([item("a", owner="broken#i1", exp=NOW + 3_600_000)], NOW,
                      sessions=sessions)
    (row,) = st.stranded
    assert row.stuck and row.reason.startswith("silent: session item malformed")
    assert "session_expires_at_ms is missing" in row.reason
