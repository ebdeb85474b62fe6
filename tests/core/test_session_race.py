"""Hypothesis state machine: workers with sessions race for one stream on real DynamoDB Local.

Time is simulated (each worker's wall clock is true time plus its own skew) while every write
really runs against DynamoDB. Workers start sessions, heartbeat (or pause: they just stop),
acquire the stream under their session, handle messages and checkpoint (some checkpoints land
late), release; a sweeper with its own skewed clock declares silent sessions dead and reaps them.

Invariants: at most one worker believes it holds the stream at any instant (belief ends at the
session fence, TTL - skew - margin after its last renewal was sent); no message is handled after
the fence; last_seq never goes back; once a sweep has run, no stream is owned by a dead session.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from holdfast.core.exceptions import AcquireFailed, LeaseLost, SessionConflict, SessionLost
from holdfast.core.model import Lease
from holdfast.core.rules import LeaseTiming
from holdfast.core.schema import BACKSTOP_MS, SessionState
from holdfast.core.sessions import Session, SessionStore, sweep_sessions
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from tests.conftest import client_for

TIMING = LeaseTiming(lease_ms=4_000, heartbeat_ms=1_000, skew_ms=500, margin_ms=200)
WORKERS = 3
LOG = logging.getLogger("tests.session_race")
_ids = itertools.count()


@dataclass
class Sim:
    """One simulated worker process: a skewed clock, its session and what it believes."""

    name: str
    skew: int
    session: Session | None = None
    fence: int = 0  # true time until which its session may be used
    lease: Lease | None = None
    seq: int = -1  # highest seq handled under the current lease


class SessionRace(RuleBasedStateMachine):
    aws: LocalAws

    def __init__(self) -> None:
        super().__init__()
        self.ddb: Any = client_for(self.aws, "dynamodb")
        self.true_now = 1_700_000_000_000
        self.run = next(_ids)
        self.conn_id = f"srace-{self.run}"
        self.sims: list[Sim] = []
        self.sessions: list[SessionStore] = []
        self.leases: list[LeaseStore] = []
        self.max_seq = -1
        self.next_msg = 0
        self.late: list[tuple[int, Lease, int]] = []  # (worker, lease, seq) sent but not landed

    @initialize(skews=st.lists(st.integers(-TIMING.skew_ms // 2, TIMING.skew_ms // 2),
                               min_size=WORKERS + 1, max_size=WORKERS + 1))
    def setup(self, skews: list[int]) -> None:
        create_stream(self.ddb, self.aws.table, self.conn_id, "ws://127.0.0.1:9/s/race")
        for i, skew in enumerate(skews[:WORKERS]):
            sim = Sim(f"r{self.run}w{i}", skew)
            self.sims.append(sim)
            clock = lambda s=sim: self.true_now + s.skew  # noqa: E731
            self.sessions.append(SessionStore(self.ddb, self.aws.session_table, self.aws.table,
                                              ttl_ms=TIMING.lease_ms, skew_ms=TIMING.skew_ms,
                                              clock=clock))
            self.leases.append(LeaseStore(self.ddb, self.aws.table, lease_ms=BACKSTOP_MS,
                                          skew_ms=TIMING.skew_ms, clock=clock))
        self.sweeper_skew = skews[WORKERS]
        self.sweeper = SessionStore(self.ddb, self.aws.session_table, self.aws.table,
                                    ttl_ms=TIMING.lease_ms, skew_ms=TIMING.skew_ms,
                                    clock=lambda: self.true_now + self.sweeper_skew)
        # Every example starts with a holder, so the interesting races are steps away.
        self.start_session(0)
        self.acquire(0)

    def _believes(self, sim: Sim) -> bool:
        return sim.lease is not None and sim.session is not None and self.true_now < sim.fence

    @rule(ms=st.one_of(st.integers(1, 1_500), st.sampled_from([
        TIMING.usable_ms, TIMING.lease_ms, TIMING.lease_ms + TIMING.skew_ms,
        TIMING.lease_ms + 2 * TIMING.skew_ms])))
    def advance(self, ms: int) -> None:
        """Time passes; a worker that does not heartbeat meanwhile was paused."""
        self.true_now += ms

    @rule(i=st.integers(0, WORKERS - 1))
    def start_session(self, i: int) -> None:
        sim = self.sims[i]
        if sim.session is not None and self.true_now < sim.fence:
            return  # a live process does not restart itself
        sent = self.true_now
        try:
            sim.session = self.sessions[i].start(sim.name, capacity=1)
        except SessionConflict:
            return
        sim.fence, sim.lease = sent + TIMING.usable_ms, None

    @precondition(lambda self: any(s.session for s in self.sims))
    @rule(i=st.integers(0, WORKERS - 1))
    def heartbeat(self, i: int) -> None:
        sim = self.sims[i]
        if sim.session is None:
            return
        if self.true_now >= sim.fence:
            # Fenced: the worker gives this incarnation up for good (it never renews it again).
            sim.session, sim.lease = None, None
            return
        sent = self.true_now
        try:
            sim.session = self.sessions[i].heartbeat_full(
                sim.session, held=int(bool(sim.lease)), capacity=1).session
        except SessionLost:
            sim.session, sim.lease = None, None
            return
        sim.fence = max(sim.fence, sent + TIMING.usable_ms)

    @rule(i=st.integers(0, WORKERS - 1))
    def acquire(self, i: int) -> None:
        sim = self.sims[i]
        if sim.session is None or sim.lease is not None or self.true_now >= sim.fence:
            return
        try:
            sim.lease = self.leases[i].acquire(self.conn_id, sim.session.owner)
        except AcquireFailed:
            return
        sim.seq = sim.lease.last_seq if sim.lease.last_seq is not None else -1

    @rule(i=st.integers(0, WORKERS - 1), late=st.booleans())
    def handle_and_checkpoint(self, i: int, late: bool) -> None:
        """Handle one message (only inside the fence) and write the checkpoint, maybe late."""
        sim = self.sims[i]
        if not self._believes(sim):
            return
        assert sim.lease is not None
        sim.seq += 1
        if late:
            self.late.append((i, sim.lease, sim.seq))
            return
        self._checkpoint(i, sim.lease, sim.seq)

    @precondition(lambda self: bool(self.late))
    @rule()
    def land_late_checkpoint(self) -> None:
        i, lease, seq = self.late.pop(0)
        self._checkpoint(i, lease, seq)

    def _checkpoint(self, i: int, lease: Lease, seq: int) -> None:
        sim = self.sims[i]
        try:
            renewed = self.leases[i].renew(lease, seq, extend=False)
        except LeaseLost:
            if sim.lease is lease:
                sim.lease = None
            return
        if sim.lease is lease:
            sim.lease = renewed

    @rule(i=st.integers(0, WORKERS - 1))
    def release(self, i: int) -> None:
        sim = self.sims[i]
        if not self._believes(sim):
            return
        assert sim.lease is not None
        self.leases[i].release(sim.lease, sim.seq if sim.seq >= 0 else None)
        sim.lease = None

    @precondition(lambda self: any(self._believes(s) for s in self.sims))
    @rule(holder=st.integers(0, WORKERS - 1), taker=st.integers(0, WORKERS - 1),
          delta=st.sampled_from([-1, 0, 1, 200]), at_fence=st.booleans())
    def jump_to_takeover(self, holder: int, taker: int, delta: int, at_fence: bool) -> None:
        """Jump to the holder's last instant inside its fence, or to the first instant the
        sweeper may declare it dead; sweep, and let another worker try to take the stream:
        where a broken fence or an early death would show."""
        h = self.sims[holder]
        if not self._believes(h) or h.session is None or taker == holder:
            return
        edge = h.session.expires_at_ms - h.skew + TIMING.skew_ms - self.sweeper_skew
        self.true_now = max(self.true_now, h.fence - 1 if at_fence else edge + delta)
        self.sweep()
        self.start_session(taker)
        self.acquire(taker)

    @rule()
    def sweep(self) -> None:
        sweep_sessions(self.sweeper, self.true_now + self.sweeper_skew, TIMING.skew_ms, LOG)
        # Every stream of a dead (or ended) session is released by the sweep that found it.
        item = self.leases[0].get(self.conn_id)
        assert item is not None
        if item.lease_owner is not None:
            worker = item.lease_owner.rpartition("#")[0]
            owner_session = self.sweeper.get(worker)
            assert owner_session is not None
            assert (owner_session.state is SessionState.ALIVE
                    and owner_session.owner == item.lease_owner), "stream left to a dead session"

    @invariant()
    def at_most_one_believer(self) -> None:
        if not self.sims:
            return
        believers = [s.name for s in self.sims if self._believes(s)]
        assert len(believers) <= 1, f"two workers hold the stream at once: {believers}"

    @invariant()
    def checkpoint_never_goes_back(self) -> None:
        if not self.sims:
            return
        item = self.leases[0].get(self.conn_id)
        if item is not None and item.last_seq is not None:
            assert item.last_seq >= self.max_seq
            self.max_seq = item.last_seq


@pytest.mark.slow
def test_session_race(ddb_local: LocalAws) -> None:
    """Paused workers, late checkpoints, sweeps and releases never make two holders."""
    SessionRace.aws = ddb_local
    runner = SessionRace.TestCase
    runner.settings = settings(max_examples=30, stateful_step_count=40, deadline=None)
    runner().runTest()
