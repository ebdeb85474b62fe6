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
