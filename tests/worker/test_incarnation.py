"""A worker's new incarnation waits out a crashed predecessor with its id, refuses a live
twin, and retries a table that does not answer; a lost session's restart is retried, then
given up; on DynamoDB Local, with no real waiting."""

from __future__ import annotations

from typing import Any

import pytest

from holdfast.core.exceptions import SessionConflict, StoreUnavailable
from holdfast.core.model import str_attr
from holdfast.core.rules import LeaseTiming
from holdfast.core.schema import SESSION, SessionState, session_table_definition
from holdfast.core.session_items import ENDED_AT_STOP, ENDED_BEFORE_START
from holdfast.core.sessions import SessionStore
from holdfast.localaws import LocalAws
from holdfast.worker.incarnation import (
    end_incarnation,
    end_kept_session,
    restart_incarnation,
    start_incarnation,
)
from tests.conftest import client_for, own_tables
from tests.core.test_store import Clock

TIMING = LeaseTiming(lease_ms=8_000, heartbeat_ms=2_000, skew_ms=1_000)


class Time:
    """One clock for the table's wall and the worker's monotonic ms; sleeping advances it."""

    def __init__(self) -> None:
        self.wall = Clock()
        self.slept: list[float] = []
        self.on_sleep: Any = None  # what happens elsewhere while we sleep

    def mono(self) -> int:
        return self.wall.now - 1_600_000_000_000

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.wall.now += round(s * 1000)
        if self.on_sleep is not None:
            self.on_sleep()


@pytest.fixture
def t() -> Time:
    return Time()


@pytest.fixture
def sessions(ddb_local: LocalAws, t: Time) -> SessionStore:
    lease_table, session_table = own_tables(ddb_local)
    return SessionStore(client_for(ddb_local, "dynamodb"), session_table, lease_table,
                        ttl_ms=TIMING.lease_ms, skew_ms=TIMING.skew_ms, clock=t.wall)


async def _start(sessions: SessionStore, worker_id: str, t: Time) -> Any:
    return await start_incarnation(sessions, worker_id, capacity=10, version="v1",
                                   timing=TIMING, mono=t.mono, sleep=t.sleep,
                                   rand=lambda: 0.5)


async def test_a_crashed_predecessor_is_waited_out(sessions: SessionStore, t: Time,
                                                   unique_id: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A predecessor with our id that stopped heartbeating: we start once its TTL + skew has
    passed, after one warning, and the write's send time is returned."""
    old = sessions.start(unique_id, 10)
    session, sent = await _start(sessions, unique_id, t)
    assert session.incarnation != old.incarnation and session.worker_id == unique_id
    assert sent == t.mono()
    assert sum(t.slept) * 1000 >= TIMING.lease_ms + TIMING.skew_ms
    assert caplog.text.count("worker id in use by a live session") == 1


async def test_a_predecessor_our_start_declares_dead_is_counted_once(
        sessions: SessionStore, t: Time, unique_id: str) -> None:
    """Our silent predecessor, declared dead by our start, is a death (``DeadSessions``);
    one that said goodbye (ENDED) is not."""
    deaths: list[str] = []

    async def start() -> Any:
        return await start_incarnation(sessions, unique_id, capacity=10, version="v1",
                                       timing=TIMING, mono=t.mono, sleep=t.sleep,
                                       rand=lambda: 0.5, declared_dead=lambda: deaths.append(""))

    sessions.start(unique_id, 10)  # crashed: never heard of again
    session, _ = await start()
    assert len(deaths) == 1
    sessions.end(session, "stopping")
    await start()
    assert len(deaths) == 1


async def test_our_own_start_whose_answer_was_lost_is_no_death(
        sessions: SessionStore, t: Time, unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start write that landed but whose answer was lost (a timeout): the next attempt
    waits that incarnation out and replaces it, without counting it as a dead worker."""
    begin, deaths = sessions.begin, []

    def lost_answer(*args: Any, **kwargs: Any) -> Any:
        begin(*args, **kwargs)
        monkeypatch.setattr(sessions, "begin", begin)
        raise StoreUnavailable("PutItem", "read timeout")

    monkeypatch.setattr(sessions, "begin", lost_answer)
    session, _ = await start_incarnation(sessions, unique_id, capacity=10, version="v1",
                                         timing=TIMING, mono=t.mono, sleep=t.sleep,
                                         rand=lambda: 0.5,
                                         declared_dead=lambda: deaths.append(""))
    item = sessions.get(unique_id)
    assert item is not None and item.incarnation == session.incarnation and deaths == []


async def test_the_send_time_is_taken_after_the_predecessors_reap(
        sessions: SessionStore, t: Time, unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A predecessor whose reap takes longer than a TTL (thousands of streams): the send time
    the keeper counts the new session's fence from is after the reap, not before it."""
    sessions.start(unique_id, 10)
    reap = sessions.reap

    def slow_reap(item: Any) -> Any:
        t.wall.now += TIMING.lease_ms + 1_000  # the reap's releases take this long
        return reap(item)

    monkeypatch.setattr(sessions, "reap", slow_reap)
    session, sent = await _start(sessions, unique_id, t)
    assert sent == t.mono()
    assert session.expires_at_ms == t.wall.now + TIMING.lease_ms


async def test_a_live_twin_is_refused(sessions: SessionStore, t: Time, unique_id: str) -> None:
    """A second process with our id that keeps heartbeating: refused after TTL + skew + two
    heartbeats, not waited for forever."""
    twin = sessions.start(unique_id, 10)
    t.on_sleep = lambda: sessions.heartbeat_full(twin, held=0, capacity=10)
    with pytest.raises(SessionConflict):
        await _start(sessions, unique_id, t)
    assert sum(t.slept) * 1000 >= TIMING.lease_ms + TIMING.skew_ms + 2 * TIMING.heartbeat_ms


async def test_a_table_that_does_not_answer_is_retried(sessions: SessionStore, t: Time,
                                                       unique_id: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """StoreUnavailable (throttled, timed out) twice, then the start lands: retried with a
    jittered pause of about a heartbeat (at most a second), never raised."""
    begin, calls = sessions.begin, []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) <= 2:
            raise StoreUnavailable("PutItem", "throttled")
        return begin(*args, **kwargs)

    monkeypatch.setattr(sessions, "begin", flaky)
    session, _ = await _start(sessions, unique_id, t)
    assert session.worker_id == unique_id and len(calls) == 3
    assert t.slept == [1.0, 1.0]  # min(1 s, heartbeat) x (0.5 + 0.5)


def _sessions_on(ddb_local: LocalAws, table: str, t: Time) -> SessionStore:
    lease_table, _ = own_tables(ddb_local)
    return SessionStore(client_for(ddb_local, "dynamodb"), table, lease_table,
                        ttl_ms=TIMING.lease_ms, skew_ms=TIMING.skew_ms, clock=t.wall)


async def _restart(sessions: SessionStore, worker_id: str, t: Time) -> bool:
    async def start() -> None:
        await _start(sessions, worker_id, t)

    return await restart_incarnation(start, for_ms=10_000, mono=t.mono,
                                     stopping=lambda: False, sleep=t.sleep, rand=lambda: 0.5)


async def test_a_restart_that_keeps_failing_is_said_retried_and_given_up(
        ddb_local: LocalAws, t: Time, unique_id: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """A session table that is gone (ConfigError, which the start does not retry): each try
    logs an ERROR naming it, the next comes after a doubling back-off, and once the restart's
    time is up it gives up (False) instead of leaving the worker without a session forever."""
    sessions = _sessions_on(ddb_local, f"gone-{unique_id}", t)
    assert await _restart(sessions, unique_id, t) is False
    assert t.slept == [0.75, 1.5, 3.0, 6.0]  # RESTART_BACKOFF at rand 0.5, then 10 s are up
    tries = [r for r in caplog.records if r.getMessage().startswith("cannot start a new session")]
    assert [r.levelname for r in tries] == ["ERROR"] * 5
    assert all("ConfigError" in getattr(r, "error", "") for r in tries)
    assert tries[-1].getMessage() == "cannot start a new session: giving up"


async def test_a_restart_lands_once_the_table_is_back(ddb_local: LocalAws, t: Time,
                                                     unique_id: str) -> None:
    """The session table restored during the back-off: the next try starts the session."""
    table = f"restored-{unique_id}"
    sessions = _sessions_on(ddb_local, table, t)
    ddb = client_for(ddb_local, "dynamodb")
    t.on_sleep = lambda: (len(t.slept) == 2 and ddb.create_table(
        **session_table_definition(table)))
    assert await _restart(sessions, unique_id, t) is True
    assert len(t.slept) == 2
    item = sessions.get(unique_id)
    assert item is not None and item.state is SessionState.ALIVE


async def test_a_stop_during_the_start_leaves_no_live_incarnation(
        sessions: SessionStore, t: Time, unique_id: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's stop began while the start's write was out: that incarnation is ended at
    once and none is returned (nothing keeps it alive); once stopping, no write is made."""
    stopping = False
    begin, calls = sessions.begin, []

    def racing(*args: Any, **kwargs: Any) -> Any:
        nonlocal stopping
        calls.append(args)
        session = begin(*args, **kwargs)
        stopping = True  # SIGTERM meanwhile
        return session

    monkeypatch.setattr(sessions, "begin", racing)

    async def starting() -> Any:
        return await start_incarnation(sessions, unique_id, capacity=10, version="v1",
                                       timing=TIMING, mono=t.mono, sleep=t.sleep,
                                       stopping=lambda: stopping)

    assert await starting() is None
    item = sessions.get(unique_id)
    assert item is not None and item.state is SessionState.ENDED
    assert _end_reason(sessions, unique_id) == ENDED_BEFORE_START
    assert await starting() is None and len(calls) == 1  # stopping: not even tried


def _end_reason(sessions: SessionStore, worker_id: str) -> str | None:
    raw = sessions.client.get_item(TableName=sessions.table, Key=sessions._key(worker_id),
                                   ConsistentRead=True)["Item"]
    return str_attr(raw, SESSION.end_reason)


async def test_ending_our_session_says_why_and_a_failed_end_is_logged(
        sessions: SessionStore, unique_id: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """``end_incarnation`` writes ENDED with its reason; a session no longer ours and ALIVE
    is not ended (False); a table that does not answer is logged and left to expire (False)."""
    session = sessions.start(unique_id, 10)
    assert await end_incarnation(sessions, session, reason=ENDED_AT_STOP)
    assert _end_reason(sessions, unique_id) == ENDED_AT_STOP
    assert not await end_incarnation(sessions, session, reason=ENDED_AT_STOP)
    assert "session not ended" in caplog.text

    def unreachable(*args: Any, **kwargs: Any) -> bool:
        raise StoreUnavailable("UpdateItem", "connection refused")

    monkeypatch.setattr(sessions, "end", unreachable)
    assert not await end_incarnation(sessions, session, reason=ENDED_AT_STOP)
    assert "cannot end the session; it will expire" in caplog.text


class _Keeper:
    """The part of a ``SessionKeeper`` a session's end uses: its store, session and stop."""

    def __init__(self, sessions: SessionStore, session: Any) -> None:
        self.store, self.session, self.stopped = sessions, session, False

    def stop(self) -> None:
        self.stopped = True


async def test_a_kept_session_ends_after_its_heartbeats_stop(
        sessions: SessionStore, unique_id: str) -> None:
    """``end_kept_session`` stops the heartbeats, then writes ENDED with its reason; left to
    expire (a handler still running), the heartbeats stop and the session stays ALIVE."""
    kept = _Keeper(sessions, sessions.start(unique_id, 10))
    assert not await end_kept_session(kept, reason=ENDED_AT_STOP,  # type: ignore[arg-type]
                                      leave_to_expire=True)
    item = sessions.get(unique_id)
    assert kept.stopped and item is not None and item.state is SessionState.ALIVE
    kept = _Keeper(sessions, kept.session)
    assert await end_kept_session(kept, reason=ENDED_AT_STOP)  # type: ignore[arg-type]
    item = sessions.get(unique_id)
    assert kept.stopped and item is not None and item.state is SessionState.ENDED
    assert _end_reason(sessions, unique_id) == ENDED_AT_STOP
