"""Hypothesis state machine: skewed workers race for one lease on the real local DynamoDB.

Time is simulated (each worker's wall clock is true time plus its own skew) while every
conditional write really runs against DynamoDB. Workers acquire, renew with a checkpoint, release,
and lose responses or send requests that land late; the reaper frees a holding only once its
holder is past its fence (an acquire never takes an owned stream). Invariants: at most one
worker believes it holds a valid lease at any instant, the epoch rises with every
acquisition, last_seq never decreases and a stale owner's writes always fail.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from holdfast.core.exceptions import AcquireFailed, LeaseLost, StoreUnavailable
from holdfast.core.model import Lease
from holdfast.core.rules import LeaseTiming
from holdfast.core.sessions import SessionStore
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws
from tests.conftest import client_for
from tests.core.faults import lose_response

TIMING = LeaseTiming(lease_ms=4_000, heartbeat_ms=1_000, skew_ms=500, margin_ms=200)
WORKERS = 3
_ids = itertools.count()


@dataclass
class Sim:
    """One simulated worker: a skewed clock and what it believes it holds."""

    name: str
    skew: int
    lease: Lease | None = None
    deadline: int = 0  # true time until which it may use the lease (its monotonic view)
    handled: int = 0


class LeaseRace(RuleBasedStateMachine):
    aws: LocalAws

    def __init__(self) -> None:
        super().__init__()
        self.ddb: Any = client_for(self.aws, "dynamodb")
        self.true_now = 1_700_000_000_000
        self.conn_id = f"race-{next(_ids)}"
        self.sims: list[Sim] = []
        self.stores: list[LeaseStore] = []
        self.max_epoch = 0
        self.max_seq = -1
        self.current_epoch = 0  # epoch of the latest successful acquisition

    @initialize(skews=st.lists(st.integers(-TIMING.skew_ms // 2, TIMING.skew_ms // 2),
                               min_size=WORKERS, max_size=WORKERS))
    def setup(self, skews: list[int]) -> None:
        create_stream(self.ddb, self.aws.table, self.conn_id, "ws://127.0.0.1:9/s/race")
        for i, skew in enumerate(skews):
            sim = Sim(f"w{i}", skew)
            self.sims.append(sim)
            self.stores.append(LeaseStore(
                self.ddb, self.aws.table, lease_ms=TIMING.lease_ms, skew_ms=TIMING.skew_ms,
                clock=lambda s=sim: self.true_now + s.skew))

    # Jumps that land right at the edges of the lease, where a broken fence would show.
    @rule(ms=st.one_of(st.integers(1, 1_500), st.sampled_from([
        TIMING.usable_ms - 1, TIMING.usable_ms, TIMING.lease_ms, TIMING.lease_ms + TIMING.skew_ms,
        TIMING.lease_ms + 2 * TIMING.skew_ms])))
    def advance(self, ms: int) -> None:
        self.true_now += ms

    @precondition(lambda self: any(s.lease for s in self.sims))
    @rule(i=st.integers(0, WORKERS - 1))
    def reap(self, i: int) -> None:
        """The reaper frees a holding once its holder is past its fence and the skew (its
        session silent past TTL + skew, declared dead): the only way a holding ends without
        its holder (docs/concepts/protocol.md)."""
        sim = self.sims[i]
        if sim.lease is None:
            return
        self.true_now = max(self.true_now, sim.deadline + TIMING.skew_ms)
        SessionStore(self.ddb, self.aws.session_table, self.aws.table, ttl_ms=TIMING.lease_ms,
                     skew_ms=TIMING.skew_ms, clock=lambda: self.true_now).release_owned(
            self.conn_id, sim.name, "session dead")

    @rule(i=st.integers(0, WORKERS - 1), lost=st.booleans())
    def acquire(self, i: int, lost: bool) -> None:
        sim, store = self.sims[i], self.stores[i]
        if sim.lease is not None and self.true_now < sim.deadline:
            return  # a worker does not re-acquire what it believes it holds
        sent = self.true_now
        try:
            if lost:
                with lose_response(self.ddb, "UpdateItem"):
                    lease = store.acquire(self.conn_id, sim.name)
            else:
                lease = store.acquire(self.conn_id, sim.name)
        except (AcquireFailed, StoreUnavailable):
            return
        assert lease.epoch > self.max_epoch, "epoch must rise on every acquisition"
        self.max_epoch = self.current_epoch = lease.epoch
        sim.lease, sim.deadline = lease, sent + TIMING.usable_ms
        sim.handled = lease.last_seq or 0

    @precondition(lambda self: any(s.lease for s in self.sims))
    @rule(i=st.integers(0, WORKERS - 1), progress=st.integers(0, 5), late=st.integers(0, 1_500),
          lost=st.booleans())
    def renew(self, i: int, progress: int, late: int, lost: bool) -> None:
        """A renewal sent ``late`` ms ago lands now (its expiry computed at send time)."""
        sim, store = self.sims[i], self.stores[i]
        if sim.lease is None:
            return
        if self.true_now >= sim.deadline:
            sim.lease = None  # self-fenced: it stops using the lease and never renews it
            return
        sim.handled += progress
        stale = sim.lease.epoch != self.current_epoch
        sent = self.true_now - late
        saved = self.true_now
        self.true_now = sent  # the store reads its clock when it builds the request
        try:
            if lost:
                with lose_response(self.ddb, "UpdateItem"):
                    sim.lease = store.renew(sim.lease, sim.handled)
            else:
                sim.lease = store.renew(sim.lease, sim.handled)
            sim.deadline = max(sim.deadline, sent + TIMING.usable_ms)
            assert not stale, "a stale owner's renewal succeeded"
        except LeaseLost:
            sim.lease = None
        except StoreUnavailable:
            pass
        finally:
            self.true_now = saved

    @precondition(lambda self: any(s.lease for s in self.sims))
    @rule(i=st.integers(0, WORKERS - 1))
    def release(self, i: int) -> None:
        sim, store = self.sims[i], self.stores[i]
        if sim.lease is None:
            return
        stale = sim.lease.epoch != self.current_epoch
        before = store.get_raw(self.conn_id) if stale else None
        reason = store.release(sim.lease, sim.handled if self.true_now < sim.deadline else None)
        if stale:
            # A stale holder's release changes nothing. It reports the loss if someone holds
            # the item; an item already released by its newer holder is simply "nothing to do".
            assert store.get_raw(self.conn_id) == before, "a stale release changed the item"
            if before is not None and "lease_owner" in before:
                assert reason is not None, "a stale owner's release reported success"
        sim.lease = None

    @invariant()
    def one_believer(self) -> None:
        believers = [s.name for s in self.sims
                     if s.lease is not None and self.true_now < s.deadline]
        assert len(believers) <= 1, f"two workers believe they hold the lease: {believers}"

    @invariant()
    def checkpoint_monotonic(self) -> None:
        if not self.sims:
            return
        raw = self.stores[0].get_raw(self.conn_id)
        seq = int(raw["last_seq"]["N"]) if raw and "last_seq" in raw else -1
        assert seq >= self.max_seq, "last_seq moved backwards"
        self.max_seq = seq


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ddb_local", "moto_local"])
def test_lease_race(backend: str, request: pytest.FixtureRequest) -> None:
    """Racing, skewed, lossy workers never share a lease and never regress a checkpoint."""
    LeaseRace.aws = request.getfixturevalue(backend)
    run = LeaseRace.TestCase
    run.settings = settings(max_examples=25 if backend == "ddb_local" else 10,
                            stateful_step_count=30, deadline=None)
    run().runTest()
