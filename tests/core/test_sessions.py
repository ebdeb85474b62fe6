"""Worker sessions on DynamoDB Local: start, heartbeat, orders, death, reaping, identity."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from holdfast.core.exceptions import (
    LeaseLost,
    LossReason,
    SessionConflict,
    SessionLost,
    StoreUnavailable,
)
from holdfast.core.expressions import renew_clauses
from holdfast.core.model import Lease
from holdfast.core.orders import Order, parse_order
from holdfast.core.reaping import REAP_SETTLE_MS
from holdfast.core.schema import BACKSTOP_MS, GSI_NAME, OWNER_INDEX_NAME, SessionState
from holdfast.core.sessions import ReportedDeath, SessionStore, sweep_sessions
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from tests.conftest import client_for, own_tables
from tests.core.test_store import Clock

TTL_MS = 8_000
SKEW_MS = 1_000
LOG = logging.getLogger("tests.sessions")


@pytest.fixture
def ddb(ddb_local: LocalAws) -> Any:
    return client_for(ddb_local, "dynamodb")


@pytest.fixture
def tables(ddb_local: LocalAws) -> tuple[str, str]:
    """Lease and session tables of this test's own: a sweep reads the whole session table, and
    the shared one holds sessions other tests ended (reaped by this test's sweep otherwise)."""
    return own_tables(ddb_local)


@pytest.fixture
def sessions(tables: tuple[str, str], ddb: Any, clock: Clock) -> SessionStore:
    return SessionStore(ddb, tables[1], tables[0], ttl_ms=TTL_MS, skew_ms=SKEW_MS, clock=clock)


@pytest.fixture
def leases(tables: tuple[str, str], ddb: Any, clock: Clock) -> LeaseStore:
    return LeaseStore(ddb, tables[0], lease_ms=BACKSTOP_MS, skew_ms=SKEW_MS, clock=clock)


def held_streams(leases: LeaseStore, owner: str, ids: list[str]) -> list[Lease]:
    for conn in ids:
        assert create_stream(leases.client, leases.table, conn, f"ws://127.0.0.1:9/{conn}")
    return [leases.acquire(conn, owner) for conn in ids]


def test_heartbeat_extends_and_returns_orders(sessions: SessionStore, clock: Clock,
                                              unique_id: str) -> None:
    """A heartbeat moves the expiry; an order shows up once and is gone after its ack."""
    s = sessions.start(unique_id, capacity=10)
    clock.now += 2_000
    beat = sessions.heartbeat_full(s, held=3, capacity=10)
    s2, orders = beat.session, beat.orders
    assert s2.expires_at_ms == clock.now + TTL_MS and orders == frozenset()
    assert sessions.add_orders(s.owner, [Order.stop("c1").encode()])
    orders = sessions.heartbeat_full(s2, held=3, capacity=10).orders
    assert orders == {"stop:c1"} and parse_order("stop:c1") == Order.stop("c1")
    orders = sessions.heartbeat_full(s2, held=2, capacity=10, done=orders).orders
    assert orders == frozenset()
    item = sessions.get(unique_id)
    assert item is not None and item.held == 2 and item.state is SessionState.ALIVE


def test_a_heartbeat_applied_after_a_later_one_never_moves_the_expiry_back(
        sessions: SessionStore, clock: Clock, unique_id: str) -> None:
    """A heartbeat written with an older time than the one stored (applied late, or our wall
    clock stepped back) leaves the expiry where the later one put it, and the session stands
    (not lost): orders still come back."""
    s = sessions.start(unique_id, capacity=10)
    clock.now += 2_000
    later = sessions.heartbeat_full(s, held=1, capacity=10).session.expires_at_ms
    assert sessions.add_orders(s.owner, [Order.stop("c1").encode()])
    clock.now -= 1_000  # the older heartbeat's time
    beat = sessions.heartbeat_full(s, held=1, capacity=10)
    item = sessions.get(unique_id)
    assert item is not None and item.expires_at_ms == later == beat.session.expires_at_ms
    assert item.state is SessionState.ALIVE and beat.orders == {"stop:c1"}


@pytest.mark.parametrize("stored", [{"N": "9999999999999"}, {"S": "tomorrow"}],
                         ids=["far-ahead", "not-a-number"])
def test_a_heartbeat_writes_over_an_expiry_none_of_ours_could_have_written(
        sessions: SessionStore, ddb: Any, clock: Clock, unique_id: str,
        stored: dict[str, str]) -> None:
    """An expiry more than two TTLs ahead of the heartbeat's time (set by hand, or a wall clock
    stepped back that far), or not a number: the heartbeat writes its own over it, with its
    held count. Kept, every heartbeat was a no-op and a dead worker's streams stayed owned
    until that time."""
    s = sessions.start(unique_id, capacity=10)
    ddb.update_item(TableName=sessions.table, Key=sessions._key(unique_id),
                    UpdateExpression="SET session_expires_at_ms = :e",
                    ExpressionAttributeValues={":e": stored})
    clock.now += 1_000
    beat = sessions.heartbeat_full(s, held=4, capacity=10)
    item = sessions.get(unique_id)
    assert item is not None and item.expires_at_ms == clock.now + TTL_MS
    assert beat.session.expires_at_ms == item.expires_at_ms and item.held == 4


def test_a_session_records_its_worker_version(sessions: SessionStore, ddb: Any,
                                              unique_id: str) -> None:
    """The version a worker starts with is in its session item; an odd one reads as unknown."""
    sessions.start(unique_id, capacity=1, version="holdfast-worker:42")
    item = sessions.get(unique_id)
    assert item is not None and item.version == "holdfast-worker:42"
    sessions.start(f"{unique_id}-b", capacity=1)
    plain = sessions.get(f"{unique_id}-b")
    assert plain is not None and plain.version == ""
    ddb.update_item(TableName=sessions.table, Key={"Pk": {"S": f"WORKER#{unique_id}"}},
                    UpdateExpression="SET worker_version = :v",
                    ExpressionAttributeValues={":v": {"S": "no spaces allowed"}})
    odd = sessions.get(unique_id)
    assert odd is not None and odd.version == "" and odd.state is SessionState.ALIVE


def test_a_live_twin_is_refused(sessions: SessionStore, clock: Clock, unique_id: str) -> None:
    """A second process with the id of a live session gets SessionConflict, not the session."""
    sessions.start(unique_id, capacity=1)
    clock.now += TTL_MS  # not yet past TTL + skew
    with pytest.raises(SessionConflict, match="in use by a live process"):
        sessions.start(unique_id, capacity=1)


def test_restart_with_same_id_reaps_the_predecessor(sessions: SessionStore, leases: LeaseStore,
                                                    clock: Clock, unique_id: str) -> None:
    """A new incarnation never inherits: the silent predecessor's streams are released."""
    old = sessions.start(unique_id, capacity=5)
    held = held_streams(leases, old.owner, [f"{unique_id}-{i}" for i in range(3)])
    clock.now += TTL_MS + SKEW_MS + 1
    new = sessions.start(unique_id, capacity=5)
    assert new.owner != old.owner and new.worker_id == old.worker_id
    for lease in held:
        item = leases.get(lease.conn_id)
        assert item is not None and item.lease_owner is None and item.lease_expires_at_ms == 0
    with pytest.raises(SessionLost):
        sessions.heartbeat_full(old, held=3, capacity=5)


def test_a_new_incarnations_ttl_counts_from_after_the_predecessors_reap(
        sessions: SessionStore, leases: LeaseStore, clock: Clock, unique_id: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A reap that takes longer than the TTL does not leave the new session born expired: its
    expiry and heartbeat time are those of its own write, after the reap."""
    old = sessions.start(unique_id, capacity=5)
    held = held_streams(leases, old.owner, [f"{unique_id}-{i}" for i in range(2)])
    clock.now += TTL_MS + SKEW_MS + 1
    reap = sessions.reap

    def slow_reap(item: Any) -> Any:
        clock.now += TTL_MS + 1_000  # thousands of releases
        return reap(item)

    monkeypatch.setattr(sessions, "reap", slow_reap)
    new = sessions.start(unique_id, capacity=5)
    assert new.expires_at_ms == clock.now + TTL_MS
    item = sessions.get(unique_id)
    assert item is not None and item.heartbeat_at_ms == clock.now
    assert all(leases.get(lease.conn_id).lease_owner is None  # type: ignore[union-attr]
               for lease in held)


def test_dead_only_after_ttl_and_skew_and_a_late_heartbeat_cannot_undo_it(
        sessions: SessionStore, clock: Clock, unique_id: str) -> None:
    """mark_dead refuses a session inside TTL + skew; once dead, its heartbeat is refused."""
    s = sessions.start(unique_id, capacity=1)
    item = sessions.get(unique_id)
    assert item is not None
    clock.now += TTL_MS + SKEW_MS - 1
    assert not sessions.mark_dead(item)
    clock.now += 1
    assert sessions.mark_dead(item)
    with pytest.raises(SessionLost, match="DEAD"):
        sessions.heartbeat_full(s, held=0, capacity=1)
    dead = sessions.get(unique_id)
    assert dead is not None and dead.state is SessionState.DEAD


def test_reap_releases_only_what_the_dead_session_still_owns(
        sessions: SessionStore, leases: LeaseStore, clock: Clock, unique_id: str) -> None:
    """The sweep releases the dead session's streams; one already taken by another is untouched,
    and the dead holder's late checkpoint is refused."""
    s = sessions.start(unique_id, capacity=5)
    a, b = held_streams(leases, s.owner, [f"{unique_id}-a", f"{unique_id}-b"])
    leases.release(b)
    other = leases.acquire(b.conn_id, "someone#else")
    clock.now += TTL_MS + SKEW_MS
    swept = sweep_sessions(sessions, clock.now, SKEW_MS, LOG)
    # Other tests share the table, so the sweep may reap their sessions too: judge this one's items.
    assert s.owner in swept.dead and swept.reaped >= 1
    released = leases.get(a.conn_id)
    assert released is not None and released.lease_owner is None
    assert leases.get(b.conn_id).lease_owner == other.owner  # type: ignore[union-attr]
    with pytest.raises(LeaseLost) as lost:
        leases.renew(a, 41, extend=False)
    assert lost.value.reason is LossReason.LOST
    # Nothing left: a sweep once the owner index has settled marks it reaped; one before
    # that does not (a late acquisition may not show in the index yet).
    sweep_sessions(sessions, clock.now, SKEW_MS, LOG)
    item = sessions.get(unique_id)
    assert item is not None and not item.reaped
    clock.now += REAP_SETTLE_MS
    sweep_sessions(sessions, clock.now, SKEW_MS, LOG)
    item = sessions.get(unique_id)
    assert item is not None and item.reaped


def test_one_sessions_failing_reap_leaves_the_others_to_the_sweep(
        tables: tuple[str, str], ddb: Any, leases: LeaseStore, clock: Clock,
        unique_id: str) -> None:
    """The owner-index read of one dead session fails (throttled): counted and logged, and
    the other dead session in the same Scan is still declared dead and reaped (one such
    failure used to end the whole pass, and with it the audit and the balancer's round)."""
    failing = f"{unique_id}-x#"

    class OneFails(SessionStore):
        def owned_by(self, owner: str) -> list[str]:
            if owner.startswith(failing):
                raise StoreUnavailable("find_owned", "throttled")
            return super().owned_by(owner)

    store = OneFails(ddb, tables[1], tables[0], ttl_ms=TTL_MS, skew_ms=SKEW_MS, clock=clock)
    bad, good = store.start(f"{unique_id}-x", capacity=1), store.start(f"{unique_id}-y", 1)
    (a,) = held_streams(leases, bad.owner, [f"{unique_id}-a"])
    (b,) = held_streams(leases, good.owner, [f"{unique_id}-b"])
    clock.now += TTL_MS + SKEW_MS
    swept = sweep_sessions(store, clock.now, SKEW_MS, LOG)
    assert swept.item_errors >= 1 and {bad.owner, good.owner} <= set(swept.dead)
    assert leases.get(b.conn_id).lease_owner is None  # type: ignore[union-attr]
    assert leases.get(a.conn_id).lease_owner == bad.owner  # type: ignore[union-attr]


def test_ended_session_leftovers_are_released(sessions: SessionStore, leases: LeaseStore,
                                              clock: Clock, unique_id: str) -> None:
    """A worker that said goodbye without releasing a stream has it released without a TTL."""
    s = sessions.start(unique_id, capacity=5)
    (a,) = held_streams(leases, s.owner, [f"{unique_id}-a"])
    assert sessions.end(s)
    swept = sweep_sessions(sessions, clock.now, SKEW_MS, LOG)
    assert swept.reaped == 1 and not swept.dead
    assert leases.get(a.conn_id).lease_owner is None  # type: ignore[union-attr]


def test_malformed_session_items_are_skipped(sessions: SessionStore, ddb: Any, clock: Clock,
                                             unique_id: str) -> None:
    """Foreign or broken items in the session table are counted and never block the sweep."""
    ddb.put_item(TableName=sessions.table, Item={"Pk": {"S": f"junk-{unique_id}"}})
    ddb.put_item(TableName=sessions.table, Item={
        "Pk": {"S": f"WORKER#{unique_id}-bad"}, "incarnation": {"S": "x"},
        "session_state": {"S": "ZOMBIE"}, "session_expires_at_ms": {"N": "0"}})
    sessions.start(unique_id, capacity=1)
    clock.now += TTL_MS + SKEW_MS
    swept = sweep_sessions(sessions, clock.now, SKEW_MS, LOG)
    assert swept.malformed >= 2
    assert any(owner.startswith(f"{unique_id}#") for owner in swept.dead)


def test_a_malformed_session_item_is_logged_once_a_process_and_counted_every_sweep(
        sessions: SessionStore, ddb: Any, unique_id: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """With the process's ``ReportedKeys``, a session item that stays malformed is logged at
    its first sweep only (at one sweep a second it was 86,000 lines a day), with the fix, and
    counted every sweep."""
    from holdfast.core.session_sweep import ReportedKeys

    ddb.put_item(TableName=sessions.table, Item={
        "Pk": {"S": f"WORKER#{unique_id}-bad"}, "incarnation": {"S": "x"},
        "session_state": {"S": "ALIVE"}})
    reported = ReportedKeys()
    with caplog.at_level(logging.ERROR, logger=LOG.name):
        counts = [sweep_sessions(sessions, 0, SKEW_MS, LOG, reported).malformed
                  for _ in range(3)]
    lines = [r.getMessage() for r in caplog.records if f"{unique_id}-bad" in r.getMessage()]
    assert counts == [1, 1, 1] and len(lines) == 1, lines
    assert "fix or delete it" in lines[0]


@pytest.mark.parametrize("odd", [
    {"started_at_ms": {"S": "yesterday"}, "capacity": {"N": "-5"}},
    {"held": {"N": "1.5"}, "heartbeat_at_ms": {"S": "x"}},
    {"reaped_at_ms": {"S": "never"}}], ids=["started-capacity", "held-heartbeat", "reaped"])
def test_a_session_with_an_odd_record_is_still_reaped(
        sessions: SessionStore, leases: LeaseStore, ddb: Any, clock: Clock, unique_id: str,
        odd: dict[str, Any]) -> None:
    """An attribute its liveness is not judged by (a time, a count, the reaped mark),
    mistyped or negative, reads as not recorded: the silent session is declared dead and its
    stream released (malformed, every sweep skipped it: owned for ever)."""
    s = sessions.start(unique_id, capacity=5)
    (a,) = held_streams(leases, s.owner, [f"{unique_id}-a"])
    names = {f"#a{i}": k for i, k in enumerate(odd)}
    ddb.update_item(TableName=sessions.table, Key=sessions._key(unique_id),
                    UpdateExpression="SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(odd))),
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={f":v{i}": v for i, v in enumerate(odd.values())})
    clock.now += TTL_MS + SKEW_MS + 1
    swept = sweep_sessions(sessions, clock.now, SKEW_MS, LOG)
    assert not swept.malformed and s.owner in swept.dead and swept.reaped == 1
    assert leases.get(a.conn_id).lease_owner is None  # type: ignore[union-attr]


def test_checkpoint_without_extend_touches_no_index(leases: LeaseStore, ddb: Any,
                                                    unique_id: str) -> None:
    """The checkpoint write consumes 1 write unit and no index unit; a backstop refresh moves
    the seed index, and neither touches the owner index."""
    (lease,) = held_streams(leases, "w#1", [unique_id])

    def units(expires: int | None, seq: int) -> dict[str, float]:
        update, condition, values = renew_clauses(lease, leases.clock(), expires,
                                                  seq).update_expression()
        from holdfast.core.expressions import names_for as _names
        resp = ddb.update_item(TableName=leases.table, Key={"Pk": {"S": f"CONN#{unique_id}"}},
                               UpdateExpression=update, ConditionExpression=condition,
                               ExpressionAttributeNames=_names(update + condition),
                               ExpressionAttributeValues=values,
                               ReturnConsumedCapacity="INDEXES")
        cap = resp["ConsumedCapacity"]
        out = {"table": cap["Table"]["CapacityUnits"]}
        for name, v in (cap.get("GlobalSecondaryIndexes") or {}).items():
            out[name] = v["CapacityUnits"]
        return out

    assert units(None, 5) == {"table": 1.0}
    refreshed = units(leases.clock() + BACKSTOP_MS + 1, 6)
    assert refreshed["table"] == 1.0 and refreshed.get(GSI_NAME) == 2.0
    assert OWNER_INDEX_NAME not in refreshed


def test_reported_death_declares_a_fresh_session_dead_and_releases_every_stream(
        sessions: SessionStore, leases: LeaseStore, clock: Clock, unique_id: str) -> None:
    """A platform report needs no TTL: a session that just heartbeat is DEAD, its streams free."""
    s = sessions.start(unique_id, capacity=5)
    held = held_streams(leases, s.owner, [f"{unique_id}-{i}" for i in range(3)])
    clock.now += 100
    s = sessions.heartbeat_full(s, held=3, capacity=5).session
    done = sessions.report_dead(unique_id, stopped_at_ms=clock.now, reason="task stopped")
    assert done.declared_dead and done.released == 3 and done.skipped_reason is None
    for lease in held:
        item = leases.get(lease.conn_id)
        assert item is not None and item.lease_owner is None and item.lease_expires_at_ms == 0
    with pytest.raises(SessionLost, match="DEAD"):
        sessions.heartbeat_full(s, held=3, capacity=5)
    item = sessions.get(unique_id)
    assert item is not None and item.state is SessionState.DEAD


def test_reported_death_is_idempotent(sessions: SessionStore, leases: LeaseStore, clock: Clock,
                                      unique_id: str) -> None:
    """A repeated report declares nothing twice, releases nothing twice, then says reaped."""
    s = sessions.start(unique_id, capacity=5)
    held_streams(leases, s.owner, [f"{unique_id}-a"])
    first = sessions.report_dead(unique_id, stopped_at_ms=clock.now, reason="task stopped")
    assert first.declared_dead and first.released == 1
    clock.now += REAP_SETTLE_MS
    again = sessions.report_dead(unique_id, stopped_at_ms=clock.now, reason="task stopped")
    assert not again.declared_dead and again.released == 0  # reaped now: nothing left
    third = sessions.report_dead(unique_id, stopped_at_ms=clock.now, reason="task stopped")
    assert (not third.declared_dead and third.released == 0
            and "already reaped" in (third.skipped_reason or ""))


def test_a_report_without_a_stop_time_leaves_an_alive_session_to_the_sweeper(
        sessions: SessionStore, leases: LeaseStore, clock: Clock, unique_id: str) -> None:
    """A report that says nothing of when the task stopped never declares an ALIVE session
    dead (finding 4), within its TTL or past it: silent past TTL + skew is the sweeper's to
    declare, and the reporter's policy names no expiry; a DEAD one it still reaps."""
    s = sessions.start(unique_id, capacity=5)
    (lease,) = held_streams(leases, s.owner, [f"{unique_id}-a"])
    done = sessions.report_dead(unique_id, stopped_at_ms=None, reason="no stoppedAt")
    assert not done.declared_dead and "left to its TTL" in (done.skipped_reason or "")
    assert leases.get(lease.conn_id).lease_owner == s.owner  # type: ignore[union-attr]
    clock.now += TTL_MS + SKEW_MS
    late = sessions.report_dead(unique_id, stopped_at_ms=None, reason="late")
    assert not late.declared_dead and late.released == 0
    item = sessions.get(unique_id)
    assert item is not None and item.state is SessionState.ALIVE
    assert sessions.mark_dead(item)  # the sweeper's call
    reaped = sessions.report_dead(unique_id, stopped_at_ms=None, reason="later")
    assert not reaped.declared_dead and reaped.released == 1


def test_a_report_of_a_stop_before_the_last_heartbeat_is_refused(
        sessions: SessionStore, leases: LeaseStore, clock: Clock, unique_id: str) -> None:
    """A session that heartbeated after the reported stop (+ skew) is alive: refused (a false
    report must not give its streams a second deliverer, finding 4)."""
    stopped_at = clock.now
    s = sessions.start(unique_id, capacity=5)
    (lease,) = held_streams(leases, s.owner, [f"{unique_id}-a"])
    clock.now += SKEW_MS + 1
    sessions.heartbeat_full(s, held=1, capacity=5)
    clock.now += 1
    done = sessions.report_dead(unique_id, stopped_at_ms=stopped_at, reason="false report")
    assert not done.declared_dead and "heartbeated" in (done.skipped_reason or "")
    assert leases.get(lease.conn_id).lease_owner == s.owner  # type: ignore[union-attr]


class HeartbeatAfterTheReportsRead(SessionStore):
    """The real store, whose session's process heartbeats right after a report read it (the
    report is about another process, or wrong): the one race the read's checks cannot see."""

    beat: Any = None  # (session, clock) to heartbeat once after the next read

    def get(self, worker_id: str, *, only: tuple[str, ...] = ()) -> Any:
        item = super().get(worker_id, only=only)
        if self.beat is not None:
            session, clock = self.beat
            self.beat = None
            clock.now += SKEW_MS + 1
            self.heartbeat_full(session, held=1, capacity=5)
        return item


def test_a_heartbeat_between_a_reports_read_and_its_write_keeps_the_session_alive(
        tables: tuple[str, str], ddb: Any, leases: LeaseStore, clock: Clock,
        unique_id: str) -> None:
    """The stop time's guards are in the DEAD write's condition: a heartbeat landing after the
    report read the session (and more than the skew after the stop) fails the write, and its
    streams are not released (declared dead, they got a second deliverer)."""
    sessions = HeartbeatAfterTheReportsRead(ddb, tables[1], tables[0], ttl_ms=TTL_MS,
                                            skew_ms=SKEW_MS, clock=clock)
    s = sessions.start(unique_id, capacity=5)
    (lease,) = held_streams(leases, s.owner, [f"{unique_id}-a"])
    stopped_at = clock.now
    sessions.beat = (s, clock)
    done = sessions.report_dead(unique_id, stopped_at_ms=stopped_at, reason="false report")
    assert not done.declared_dead and done.released == 0, done
    assert "heartbeated meanwhile" in (done.skipped_reason or "")
    assert leases.get(lease.conn_id).lease_owner == s.owner  # type: ignore[union-attr]
    item = sessions.get(unique_id)
    assert item is not None and item.state is SessionState.ALIVE


def test_reported_death_spares_a_newer_incarnation_under_the_same_id(
        sessions: SessionStore, leases: LeaseStore, clock: Clock, unique_id: str) -> None:
    """A stop reported for a task that stopped before this session started leaves it alive."""
    stopped_at = clock.now
    clock.now += 5_000
    s = sessions.start(unique_id, capacity=5)
    (lease,) = held_streams(leases, s.owner, [f"{unique_id}-a"])
    done = sessions.report_dead(unique_id, stopped_at_ms=stopped_at, reason="old task")
    assert not done.declared_dead and done.released == 0
    assert "started after the task stopped" in (done.skipped_reason or "")
    assert leases.get(lease.conn_id).lease_owner == s.owner  # type: ignore[union-attr]
    sessions.heartbeat_full(s, held=1, capacity=5)  # still ALIVE


def test_reported_death_of_an_ended_session_reaps_and_of_a_missing_one_is_a_no_op(
        sessions: SessionStore, leases: LeaseStore, unique_id: str) -> None:
    """ENDED with a leftover stream: released (not re-declared); an unknown id: a clear no-op."""
    s = sessions.start(unique_id, capacity=5)
    (a,) = held_streams(leases, s.owner, [f"{unique_id}-a"])
    assert sessions.end(s)
    done = sessions.report_dead(unique_id, stopped_at_ms=None, reason="task stopped")
    assert not done.declared_dead and done.released == 1
    assert leases.get(a.conn_id).lease_owner is None  # type: ignore[union-attr]
    item = sessions.get(unique_id)
    assert item is not None and item.state is SessionState.ENDED
    missing = sessions.report_dead(f"{unique_id}-none", stopped_at_ms=None, reason="x")
    assert missing == ReportedDeath(False, 0, "no session item for this worker id")
    with pytest.raises(ValueError, match="invalid worker id"):
        sessions.report_dead("bad id!", stopped_at_ms=None, reason="x")
