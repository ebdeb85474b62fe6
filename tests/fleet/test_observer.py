"""Events and ownership segments derived from successive table scans."""

from __future__ import annotations

from holdfast.core.model import LeaseItem
from holdfast.core.schema import SessionState
from holdfast.core.session_items import SessionItem
from holdfast.fleet.observer import Observer

NOW = 10_000


def item(owner: str | None, epoch: int, seq: int | None = None, exp: int = NOW + 4000,
         state: str = "STARTED", conn_id: str = "s1") -> LeaseItem:
    return LeaseItem(conn_id, state, f"ws://h/s/{conn_id}", owner, exp if owner else 0, seq,
                     epoch)


def test_claim_move_release_sequence() -> None:
    """claimed, moved (with the resume seq), released; segments close where ownership ends."""
    obs = Observer()
    assert [e.kind for e in obs.observe(0.0, NOW, [item(None, 0)])] == []
    assert [e.kind for e in obs.observe(1.0, NOW, [item("w1", 1)])] == ["claimed"]
    moved = obs.observe(2.0, NOW, [item("w2", 2, seq=41)])
    assert [e.kind for e in moved] == ["moved"] and "resumed from seq 42" in moved[0].text
    assert [e.kind for e in obs.observe(3.0, NOW, [item(None, 2, seq=50)])] == ["released"]
    assert [(s.owner, s.start, s.end) for s in obs.segments] == [("w1", 1.0, 2.0),
                                                                 ("w2", 2.0, 3.0)]


def test_a_move_off_a_dead_or_silent_session_is_called_a_failover() -> None:
    """Between two scans the owner changed: "moved" if its old session is alive or said
    goodbye, "failed over" if it is DEAD, silent past its TTL, or a new incarnation's."""
    def moved_text(state: SessionState, incarnation: str = "a", expires: int = NOW + 4000
                   ) -> str:
        obs = Observer()
        obs.observe(0.0, NOW, [item("w1#a", 1)])
        sessions = {"w1": SessionItem("w1", incarnation, state, expires_at_ms=expires),
                    "w2": SessionItem("w2", "b", SessionState.ALIVE, expires_at_ms=NOW + 4000)}
        (event,) = obs.observe(1.0, NOW, [item("w2#b", 2)], sessions, skew_ms=500)
        return event.text

    assert " moved w1#a -> w2#b" in moved_text(SessionState.ALIVE)
    assert " moved w1#a -> w2#b" in moved_text(SessionState.ENDED)
    assert " failed over w1#a -> w2#b" in moved_text(SessionState.DEAD)
    assert " failed over w1#a -> w2#b" in moved_text(SessionState.ALIVE, expires=NOW - 600)
    assert " failed over w1#a -> w2#b" in moved_text(SessionState.ALIVE, incarnation="z")


def test_a_give_up_says_why_in_the_event() -> None:
    """A release in BACKOFF (the handler failed a message on every attempt, or the upstream
    kept failing) carries its last_error, the URL's secrets scrubbed: the live view said
    only "released"."""
    obs = Observer()
    obs.observe(0.0, NOW, [item("w1", 1)])
    parked = LeaseItem("s1", "STARTED", "ws://h/s/s1?token=hunter2", None, NOW + 30_000, 2, 1,
                       "BACKOFF", last_error="handler failed 5 times on seq 3: ValueError: x "
                                             "(ws://h/s/s1?token=hunter2)")
    (event,) = obs.observe(1.0, NOW, [parked])
    assert "gave up: handler failed 5 times on seq 3: ValueError: x" in event.text
    assert "hunter2" not in event.text


def test_expired_lease_is_not_an_owner() -> None:
    """A lease still naming a (dead) owner but past its expiry reads as 'expired', unowned."""
    obs = Observer()
    obs.observe(0.0, NOW, [item("w1", 1)])
    events = obs.observe(5.0, NOW + 5000, [item("w1", 1)])
    assert [e.kind for e in events] == ["expired"] and obs.owner_of("s1") is None


def test_same_owner_new_epoch_is_a_new_claim() -> None:
    """A worker re-acquiring its own stream (epoch +1) opens a new segment."""
    obs = Observer()
    obs.observe(0.0, NOW, [item("w1", 1)])
    assert [e.kind for e in obs.observe(1.0, NOW, [item("w1", 2)])] == ["claimed"]
    assert len(obs.segments) == 2


def test_loads_count_session_owners_for_their_worker() -> None:
    """Streams owned by ``w1#<incarnation>`` are w1's load."""
    obs = Observer()
    obs.observe(0.0, NOW, [item("w1#aaaa", 1, conn_id="c1"), item("w1#aaaa", 1, conn_id="c2"),
                           item("w2#bbbb", 1, conn_id="c3")])
    assert obs.loads() == {"w1": 2, "w2": 1}


def test_state_change_and_removal_are_reported() -> None:
    """STOPPED and a deleted item each produce an event; loads follow owners."""
    obs = Observer()
    obs.observe(0.0, NOW, [item("w1", 1)])
    assert obs.loads() == {"w1": 1}
    assert "stopped" in [e.kind for e in obs.observe(1.0, NOW, [item("w1", 1,
                                                                     state="STOPPED")])]
    assert [e.kind for e in obs.observe(2.0, NOW, [])] == ["removed"]
    assert obs.loads() == {} and obs.segments[0].end == 2.0


def test_with_sessions_only_a_live_session_holds_and_a_dead_ones_stream_is_stranded() -> None:
    """Given the session items, a stream of a session declared DEAD is no longer held though
    its expiry is an hour ahead: its segment closes with a 'stranded' event; time left is the
    live session's, not the backstop."""
    from holdfast.core.schema import SessionState
    from holdfast.core.sessions import SessionItem

    backstop = NOW + 3_600_000
    obs = Observer()
    alive = {"w1": SessionItem("w1", "aaaa", SessionState.ALIVE, NOW + 4_000)}
    obs.observe(0.0, NOW, [item("w1#aaaa", 1, exp=backstop)], alive)
    assert obs.owner_of("s1") == "w1#aaaa" and obs.streams["s1"].lease_left_ms == 4_000
    dead = {"w1": SessionItem("w1", "aaaa", SessionState.DEAD, NOW - 1, ended_at_ms=NOW)}
    (event,) = obs.observe(1.0, NOW + 500, [item("w1#aaaa", 1, exp=backstop)], dead)
    assert event.kind == "expired" and "stranded (gone: session DEAD)" in event.text
    assert obs.owner_of("s1") is None and obs.segments[0].end == 1.0


def test_release_of_a_dead_session_names_the_reaper_not_the_holder() -> None:
    """A stream freed from a dead (SIGKILLed) session is not logged 'released by' that worker."""
    from holdfast.core.schema import SessionState
    from holdfast.core.sessions import SessionItem

    dead = SessionItem("w1", "i1", SessionState.DEAD, NOW - 1000, ended_at_ms=NOW - 500)
    obs = Observer()
    obs.observe(0.0, NOW, [item("w1#i1", 1)], sessions={"w1": SessionItem(
        "w1", "i1", SessionState.ALIVE, NOW + 4000)})
    (event,) = obs.observe(1.0, NOW, [item(None, 1, seq=7)], sessions={"w1": dead})
    assert event.kind == "released" and "released by" not in event.text
    assert "freed by the reaper" in event.text and "w1#i1" in event.text
    alive = SessionItem("w2", "i2", SessionState.ALIVE, NOW + 4000)
    obs.observe(2.0, NOW, [item("w2#i2", 2, conn_id="s2")], sessions={"w2": alive})
    (event,) = obs.observe(3.0, NOW, [item(None, 2, conn_id="s2")], sessions={"w2": alive})
    assert "s2 released by w2#i2" in event.text


def test_the_rate_is_measured_between_checkpoint_moves() -> None:
    """A 10 msgs/s stream checkpointing every 2 s, scanned every 0.5 s, shows about 10
    checkpointed/s at every scan (a fixed 1 s window swung between 6.6 and 13.2), and 0 once
    its checkpoint stands still for three of its intervals."""
    obs = Observer()
    rates = []
    for n in range(40):  # 20 s of scans
        t = 0.3 + 0.5 * n
        seq = 20 * int(t // 2.0)  # the checkpoint moves by 20 every 2 s
        obs.observe(t, NOW, [item("w1", 1, seq=seq)])
        rates.append(obs.streams["s1"].rate)
    assert all(9.0 <= r <= 11.0 for r in rates[8:]), rates
    for n in range(1, 14):  # the checkpoint stands still from here
        obs.observe(20.3 + 0.5 * n, NOW, [item("w1", 1, seq=seq)])
    assert obs.streams["s1"].rate == 0.0
