"""A simulated fleet over the real ownership code, for the ownership model test.

Time is simulated: ``Fleet.now`` is true time; every actor reads its own wall clock (true time
plus a fixed skew within the allowance) and every write really runs on DynamoDB Local through
the product's own stores. What is simulated is only what the asyncio worker does around them
(``worker/session.py``, ``worker/holdings.py``, ``worker/supervisor.py`` ``carry_out``): its
session fence (send time of its last landed heartbeat + TTL - skew - margin, on its monotonic
clock, which runs at true rate), the admit check before each handler call, order handling
(the holder stops delivering and releases itself) and the fenced best-effort release.

The router is ``lambdas.router.decide.decide`` on the images read before and after each
operator write, its orders given as the handler does (order queue first, session item as the
durable copy; an owner with no live session is left to the owner audit). The sweeper is
``sweep_sessions`` plus the ``OwnerAudit``, with its own clock, ticking every second while up.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from holdfast.core.exceptions import (
    AcquireFailed,
    HoldfastError,
    LeaseLost,
    LossReason,
    SessionConflict,
    SessionLost,
    StoreUnavailable,
    StreamHeld,
)
from holdfast.core.liveness import AUDIT_INTERVAL_MS, OwnerAudit
from holdfast.core.model import Lease
from holdfast.core.orders import Order, parse_order
from holdfast.core.rules import LeaseTiming
from holdfast.core.schema import ATTR, BACKSTOP_MS, SESSION, pk_for, session_pk_for
from holdfast.core.sessions import Session, SessionStore, sweep_sessions
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream, delete_stream, set_desired_state
from holdfast.lambdas.router.decide import decide
from tests.core.faults import drop_request, lose_response

__all__ = ["T0", "TIMING", "Fleet", "Hold", "Worker"]

TIMING = LeaseTiming(lease_ms=4_000, heartbeat_ms=1_000, skew_ms=500, margin_ms=200)
SKEW = TIMING.skew_ms
T0 = 1_700_000_000_000
LOG = logging.getLogger("tests.ownership_model")


@dataclass
class Hold:
    """One stream a worker believes it holds: its lease and the highest seq handled."""

    lease: Lease
    handled: int
    gen: int  # which creation of the item it was acquired from (delete + recreate)


@dataclass
class Worker:
    """One worker process (a new ``Worker`` state per restart keeps the same id)."""

    wid: str
    skew: int
    session: Session | None = None
    fence: int = 0  # true ms; the worker stops every stream at it (its monotonic view)
    paused: bool = False
    throttled: bool = False  # its heartbeats fail (StoreUnavailable) while set
    crashed_at: int | None = None  # the process really stopped then (true ms)
    holds: dict[str, Hold] = field(default_factory=dict)
    queue: list[Order] = field(default_factory=list)  # its order queue (fast path)
    done: frozenset[str] = frozenset()  # session-item orders to acknowledge
    landed: int = 0  # true send time of the last heartbeat (or start) that reached the table
    pinned: int | None = None  # true time its clock reads during a request that lands late

    @property
    def acting(self) -> bool:
        return not self.paused and self.crashed_at is None


class Fleet:
    """The actors and the table; every method is one thing one actor does."""

    def __init__(self, ddb: Any, table: str, session_table: str, skews: list[int],
                 run: int) -> None:
        self.ddb, self.table, self.session_table = ddb, table, session_table
        self.now = T0
        self.workers = [Worker(f"m{run}w{i}", s) for i, s in enumerate(skews[:-2])]
        self.sweeper_skew, self.router_skew = skews[-2], skews[-1]
        self.leases = [self._lease_store(i) for i in range(len(self.workers))]
        self.sessions = [self._session_store(lambda i=i: self._clock(i))
                         for i in range(len(self.workers))]
        self.sweeper = self._session_store(lambda: self.now + self.sweeper_skew)
        self.router = self._session_store(lambda: self.now + self.router_skew)
        self.audit = OwnerAudit(AUDIT_INTERVAL_MS, TIMING.lease_ms, SKEW)
        self.sweeper_up_since: int | None = self.now
        self.epochs: dict[str, int] = {}  # highest epoch of any acquisition, per conn id
        self.acquired_at: dict[str, int] = {}  # true time of the last acquisition
        self.gen: dict[str, int] = {}  # creations of each item so far
        self.seen: dict[str, int] = {}  # highest seq handled in the item's current creation
        self.log: list[str] = []

    # -- plumbing -----------------------------------------------------------------------
    def _clock(self, i: int) -> int:
        w = self.workers[i]
        return (self.now if w.pinned is None else w.pinned) + w.skew

    def _lease_store(self, i: int) -> LeaseStore:
        return LeaseStore(self.ddb, self.table, lease_ms=BACKSTOP_MS, skew_ms=SKEW,
                          clock=lambda: self._clock(i))

    def _session_store(self, clock: Any) -> SessionStore:
        return SessionStore(self.ddb, self.session_table, self.table, ttl_ms=TIMING.lease_ms,
                            skew_ms=SKEW, clock=clock)

    def raw(self, conn_id: str) -> dict[str, Any] | None:
        resp = self.ddb.get_item(TableName=self.table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                                 ConsistentRead=True)
        item = resp.get("Item")
        return dict(item) if item else None

    def note(self, text: str) -> None:
        self.log.append(f"t+{self.now - T0}: {text}")

    # -- time and the sweeper --------------------------------------------------------------
    def advance(self, ms: int) -> None:
        """Time passes. At every whole second of true time (the heartbeat period) each running
        worker heartbeats (or starts a session if it has none, as the supervisor does), and
        the sweeper runs while it is up."""
        target = self.now + ms
        tick = (self.now // 1000 + 1) * 1000
        while tick <= target:
            self.now = tick
            for i, w in enumerate(self.workers):
                if w.session is None:
                    self.start_session(i)
                else:
                    self.heartbeat(i, "throttled" if w.throttled else "ok")
            if self.sweeper_up_since is not None:
                self.sweep()
            tick += 1000
        self.now = target

    def sweep(self) -> None:
        now = self.now + self.sweeper_skew
        out = sweep_sessions(self.sweeper, now, SKEW, LOG)
        if self.audit.due(now):
            self.audit.run(self.sweeper, {s.owner for s in out.alive}, now)

    def sweeper_outage(self, down: bool) -> None:
        if down:
            self.sweeper_up_since = None
        elif self.sweeper_up_since is None:
            self.sweeper_up_since = self.now

    # -- a worker -----------------------------------------------------------------------
    def awake(self, i: int) -> bool:
        """The worker runs again: past its fence, every stream stops (a best-effort release)
        and the incarnation is given up (``SessionKeeper.beat`` calls ``on_lost``)."""
        w = self.workers[i]
        if not w.acting:
            return False
        if w.session is not None and self.now >= w.fence:
            self.note(f"{w.wid} fenced")
            for conn_id in list(w.holds):
                self._release(i, conn_id)
            w.session, w.done = None, frozenset()
        return True

    def start_session(self, i: int) -> None:
        w = self.workers[i]
        if not self.awake(i) or w.session is not None:
            return
        sent = self.now
        try:
            w.session = self.sessions[i].start(w.wid, capacity=4)
        except (SessionConflict, StoreUnavailable):
            return
        w.fence, w.landed, w.done, w.queue = sent + TIMING.usable_ms, sent, frozenset(), []
        self.note(f"{w.wid} started {w.session.owner}")

    def heartbeat(self, i: int, fault: str) -> None:
        """One heartbeat: ``ok``, ``lost`` (it lands, the answer is lost) or ``throttled``."""
        w = self.workers[i]
        if not self.awake(i) or w.session is None:
            return
        sent = self.now
        try:
            with _fault(self.ddb, fault, "UpdateItem"):
                beat = self.sessions[i].heartbeat_full(w.session, held=len(w.holds),
                                                       capacity=4, done=w.done)
        except SessionLost as lost:
            self.note(f"{w.wid} session lost ({lost.why}): every stream stops")
            w.holds.clear()  # conn.lose("session"): nothing written, the reaper frees them
            w.session, w.done = None, frozenset()
            return
        except StoreUnavailable:
            if fault == "lost":
                w.landed = sent
            return  # retried until the fence; the fence does not move
        w.session, w.landed = beat.session, sent
        w.fence = max(w.fence, sent + TIMING.usable_ms)
        for text in sorted(beat.orders - w.done):
            order = parse_order(text)
            if order is not None:
                self.order(i, order)
        w.done = beat.orders

    def acquire(self, i: int, conn_id: str, fault: str, late_ms: int) -> None:
        """A claim: the acquire is built now and lands ``late_ms`` later (time passes, the
        sweeper may run meanwhile); ``fault`` loses its answer (and maybe the re-read)."""
        w = self.workers[i]
        if not self.awake(i) or w.session is None or conn_id in w.holds:
            return
        owner, sent = w.session.owner, self.now
        self.advance(late_ms)
        w.pinned = sent
        try:
            with _fault(self.ddb, fault, "UpdateItem"):
                lease = self.leases[i].acquire(conn_id, owner)
        except (AcquireFailed, StoreUnavailable):
            return
        finally:
            w.pinned = None
        self._acquired(i, lease)
        if w.session is None or w.session.owner != owner or w.crashed_at is not None:
            # worker/holdings.py: the session was lost meanwhile; release at once, never deliver.
            self._release(i, conn_id)

    def _acquired(self, i: int, lease: Lease) -> None:
        w = self.workers[i]
        prev = self.epochs.get(lease.conn_id, 0)
        assert lease.epoch > prev, (
            f"epoch went from {prev} to {lease.epoch} for {lease.conn_id}")
        self.epochs[lease.conn_id], self.acquired_at[lease.conn_id] = lease.epoch, self.now
        w.holds[lease.conn_id] = Hold(lease, -1 if lease.last_seq is None else lease.last_seq,
                                      self.gen.get(lease.conn_id, 0))
        self.note(f"{w.wid} acquired {lease.conn_id} epoch {lease.epoch - T0:+}")

    def deliver(self, i: int, conn_id: str, n: int) -> int | None:
        """Handle ``n`` frames if the admit check allows it; returns the last seq handled."""
        w = self.workers[i]
        if not self.awake(i) or w.session is None or conn_id not in w.holds:
            return None
        assert self.now < w.fence  # awake() stopped every stream past it
        hold = w.holds[conn_id]
        hold.handled += n
        if hold.gen == self.gen.get(conn_id, 0):
            self.seen[conn_id] = max(self.seen.get(conn_id, -1), hold.handled)
        return hold.handled

    def checkpoint(self, i: int, conn_id: str, fault: str) -> None:
        w = self.workers[i]
        if not self.awake(i) or conn_id not in w.holds:
            return
        hold = w.holds[conn_id]
        try:
            with _fault(self.ddb, fault, "UpdateItem"):
                hold.lease = self.leases[i].renew(hold.lease, hold.handled, extend=False)
        except LeaseLost as lost:
            if lost.reason is LossReason.STOPPED:
                self._release(i, conn_id)  # stopped: drain and release
            else:
                del w.holds[conn_id]
        except StoreUnavailable:
            pass

    def release(self, i: int, conn_id: str, fault: str) -> None:
        """The holder ends its holding (its stream finished, or a shutdown)."""
        if self.awake(i) and conn_id in self.workers[i].holds:
            self._release(i, conn_id, fault)

    def _release(self, i: int, conn_id: str, fault: str = "ok") -> None:
        hold = self.workers[i].holds.pop(conn_id)
        try:
            with _fault(self.ddb, fault, "UpdateItem"):
                self.leases[i].release(hold.lease, hold.handled if hold.handled >= 0 else None)
        except HoldfastError:
            pass  # "release failed: the lease will expire instead" (the reaper or Strays)

    def order(self, i: int, order: Order) -> None:
        """``Supervisor.carry_out``: the holder stops delivering and releases the stream."""
        w = self.workers[i]
        hold = w.holds.get(order.conn_id)
        if hold is None or not order.applies_to(hold.lease.epoch):
            return
        self.note(f"{w.wid} carries out {order.encode()}")
        self._release(i, order.conn_id)

    def take_queued(self, i: int, lose: bool) -> None:
        w = self.workers[i]
        if not self.awake(i) or not w.queue:
            return
        order = w.queue.pop(0)
        if not lose and w.session is not None:
            self.order(i, order)

    def strays(self, i: int, conn_ids: list[str]) -> None:
        """``worker/reconciler.py`` ``Strays``: take back what our session owns but we do not
        hold (a lost acquire answer whose re-read failed, a failed release)."""
        w = self.workers[i]
        if not self.awake(i) or w.session is None:
            return
        for conn_id in conn_ids:
            item = self.leases[i].get(conn_id)
            if item is None or conn_id in w.holds or item.lease_owner != w.session.owner:
                continue
            if item.started:
                with contextlib.suppress(AcquireFailed, StoreUnavailable):
                    self._acquired(i, self.leases[i].acquire(conn_id, w.session.owner))

    def shutdown(self, i: int, fail_release: bool) -> None:
        """A graceful stop: release every stream (maybe failing), end the session."""
        w = self.workers[i]
        if not self.awake(i) or w.session is None:
            return
        for conn_id in list(w.holds):
            self._release(i, conn_id, "unanswered" if fail_release else "ok")
        with contextlib.suppress(StoreUnavailable):
            self.sessions[i].end(w.session)
        w.session, w.done = None, frozenset()

    def crash(self, i: int) -> None:
        w = self.workers[i]
        if w.crashed_at is None:
            w.crashed_at, w.holds, w.session, w.queue = self.now, {}, None, []
            self.note(f"{w.wid} crashed")

    def restart(self, i: int) -> None:
        """A new process under the same worker id (it starts a session of its own)."""
        w = self.workers[i]
        if w.crashed_at is not None:
            self.workers[i] = Worker(w.wid, w.skew)

    # -- reports --------------------------------------------------------------------------
    def platform_report(self, i: int) -> None:
        """ECS reports the task stopped at its real stop time (on the platform's clock)."""
        w = self.workers[i]
        if w.crashed_at is not None:
            self.router.report_dead(w.wid, stopped_at_ms=w.crashed_at + self.router_skew,
                                    reason="task stopped")

    def false_report(self, i: int, early_ms: int | None) -> None:
        """A report on a live process: a stop time ``3 x skew + early_ms`` (``early_ms`` > 0)
        before its last landed heartbeat, which must be refused (each clock is within skew of
        true time, so the platform's and the worker's differ by up to 2 x skew, and the
        refusal allows one more skew), or no stop time (left to its TTL)."""
        w = self.workers[i]
        if w.crashed_at is not None or w.session is None:
            return
        stopped = None if early_ms is None else (
            w.landed - 3 * SKEW - early_ms + self.router_skew)
        out = self.router.report_dead(w.wid, stopped_at_ms=stopped, reason="false report")
        if stopped is not None:
            assert not out.declared_dead and not out.released, (
                f"a stop time before the last heartbeat was accepted: {out}")

    # -- operators and the router ---------------------------------------------------------
    def forced_release(self, conn_id: str) -> None:
        """An operator's forced handover: expiry 0, the owner left in place."""
        old = self.raw(conn_id)
        if old is None:
            return
        self.ddb.update_item(TableName=self.table, Key={ATTR.pk: {"S": pk_for(conn_id)}},
                             UpdateExpression="SET #exp = :zero",
                             ExpressionAttributeNames={"#exp": ATTR.lease_expires_at_ms},
                             ExpressionAttributeValues={":zero": {"N": "0"}})
        self.route("MODIFY", old, self.raw(conn_id))

    def set_state(self, conn_id: str, state: str) -> None:
        old = self.raw(conn_id)
        if old is not None and set_desired_state(self.ddb, self.table, conn_id, state):
            self.route("MODIFY", old, self.raw(conn_id))

    def delete(self, conn_id: str) -> None:
        """``holdfast rm``: a held stream is stopped first; only an unowned item is deleted."""
        old = self.raw(conn_id)
        try:
            deleted = old is not None and delete_stream(self.ddb, self.table, conn_id)
        except StreamHeld:
            self.note(f"rm {conn_id}: held, stopped first")
            self.set_state(conn_id, "STOPPED")
            return
        if deleted:
            self.note(f"deleted {conn_id}")
            self.route("REMOVE", old, None)

    def recreate(self, conn_id: str) -> None:
        if create_stream(self.ddb, self.table, conn_id, "ws://127.0.0.1:9/s/model"):
            self.gen[conn_id] = self.gen.get(conn_id, 0) + 1
            self.seen.pop(conn_id, None)
            self.note(f"recreated {conn_id}")
            self.route("INSERT", None, self.raw(conn_id))

    def delete_session_item(self, i: int) -> None:
        """An operator deletes a session item by hand (or its TTL did)."""
        self.ddb.delete_item(TableName=self.session_table,
                             Key={SESSION.pk: {"S": session_pk_for(self.workers[i].wid)}})

    def route(self, event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """The router's handler for one record: orders to the queue and the session item."""
        now = self.now + self.router_skew
        decision = decide(event, old, new, now, skew_ms=SKEW)
        owner = decision.owner
        order = decision.order()
        if order is None or owner is None:
            return
        self.note(f"router: {order.encode()} to {owner}")
        for w in self.workers:  # the queue named from the owner exists while it runs
            if w.session is not None and w.session.owner == owner:
                w.queue.append(order)
        self.router.add_orders(owner, [order.encode()])  # no live session: the audit's


@contextmanager
def _fault(ddb: Any, fault: str, op: str) -> Iterator[None]:
    """``ok``; ``lost``: the write lands, its answer is lost; ``unanswered``: lost and the
    re-read fails too; ``throttled``: the write never lands."""
    with ExitStack() as stack:
        if fault in ("lost", "unanswered"):
            stack.enter_context(lose_response(ddb, op))
        if fault == "unanswered":
            stack.enter_context(drop_request(ddb, "GetItem"))
        if fault == "throttled":
            stack.enter_context(drop_request(ddb, op))
        yield
