"""A worker's holdings: a stream it is letting go is never stranded.

In process, on DynamoDB Local and the demo upstream, with the real lease store (one test holds
back its release's answer: the write lands, the caller hears of it later).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from holdfast.core.anchor import Anchor
from holdfast.core.exceptions import LossReason
from holdfast.core.model import Lease
from holdfast.core.store import LeaseStore
from holdfast.worker.balancing import SHED
from holdfast.worker.claims import Claim
from holdfast.worker.held import monotonic_ms
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until
from tests.worker.helpers import Recorder, holdings_alone, running_worker


class SlowReleaseAnswer(LeaseStore):
    """The real store, whose release lands in the table and is answered only once
    ``answer`` is set (a busy worker or a slow connection: the router can see the released
    item before the holder hears back)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.landed, self.answer = threading.Event(), threading.Event()

    def release(self, lease: Lease, handled_seq: int | None = None,
                **kwargs: Any) -> LossReason | None:
        lost = super().release(lease, handled_seq, **kwargs)
        self.landed.set()
        self.answer.wait(10)
        return lost


class SlowAcquireAnswer(LeaseStore):
    """The real store, whose acquire lands and is answered only once ``answer`` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.landed, self.answer = threading.Event(), threading.Event()

    def acquire(self, conn_id: str, owner: str, *, anchor: Anchor | None = None) -> Lease:
        lease = super().acquire(conn_id, owner, anchor=anchor)
        self.landed.set()
        self.answer.wait(10)
        return lease


async def test_a_claim_whose_caller_is_cancelled_still_starts_what_it_acquired(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The caller (a claiming loop) cancelled while the acquire is on its way: the acquire
    lands and the stream is held and delivered, not left owned by us and held by nobody."""
    conn_id = f"{unique_id}-orphan"
    fleet.create(conn_id, upstream.url(conn_id))
    alone = holdings_alone(fleet, store_class=SlowAcquireAnswer)
    holdings, rec, store = alone.holdings, alone.rec, alone.store
    assert isinstance(store, SlowAcquireAnswer)
    caller = asyncio.create_task(holdings.claim(conn_id))
    try:
        assert await asyncio.to_thread(store.landed.wait, 10), "the acquire never landed"
        caller.cancel()
        await asyncio.sleep(0.1)
    finally:
        store.answer.set()
    await async_wait_until(lambda: rec.seqs(conn_id), 10, "delivering")
    assert caller.cancelled()
    holdings.streams[conn_id].drain_to(None, SHED)
    await async_wait_until(lambda: not holdings.streams, 5, "the stream let go")


async def test_a_nudge_for_a_stream_whose_release_is_in_flight_is_handed_on(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The released stream's nudge, arriving before its release is answered, is handed on
    (not deleted as a duplicate, which stranded it until the sweep), and once the stream is
    gone it is claimed."""
    conn_id = f"{unique_id}-inflight"
    fleet.create(conn_id, upstream.url(conn_id))
    alone = holdings_alone(fleet, store_class=SlowReleaseAnswer)
    holdings, rec, store = alone.holdings, alone.rec, alone.store
    assert isinstance(store, SlowReleaseAnswer)
    try:
        assert await holdings.claim(conn_id) is Claim.CLAIMED
        await async_wait_until(lambda: rec.seqs(conn_id), 10, "delivering")
        holdings.streams[conn_id].drain_to(None, SHED)
        assert await asyncio.to_thread(store.landed.wait, 10), "the release never landed"
        assert "lease_owner" not in fleet.item(conn_id)  # released: its nudge is on its way
        assert conn_id in holdings.streams  # ... and we have not heard back yet
        assert await holdings.claim(conn_id, "nudge") is Claim.REFUSED
    finally:
        store.answer.set()
    await async_wait_until(lambda: not holdings.streams, 5, "the stream let go")
    before = len(rec.seqs(conn_id))
    assert await holdings.claim(conn_id, "nudge") is Claim.CLAIMED
    await async_wait_until(lambda: len(rec.seqs(conn_id)) > before, 10, "delivering again")
    holdings.streams[conn_id].drain_to(None, SHED)
    await async_wait_until(lambda: not holdings.streams, 5, "the stream let go again")


async def test_a_stream_stopped_before_its_task_ran_is_still_released(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A drain in the same loop turn as the claim (a stop, a shed, an order) ends the holding
    like any other: released and gone from the worker's streams (cancelling the task before
    its first step skipped both, and the stream stayed held by nobody)."""
    conn_id = f"{unique_id}-early"
    fleet.create(conn_id, upstream.url(conn_id))
    holdings = holdings_alone(fleet).holdings
    assert await holdings.claim(conn_id) is Claim.CLAIMED
    holdings.streams[conn_id].drain_to(None, SHED)
    await async_wait_until(lambda: not holdings.streams, 5, "the stream let go")
    item = fleet.item(conn_id)
    assert "lease_owner" not in item, item.get("lease_owner")
    assert holdings.counts["released"] == 1


async def test_a_stop_during_an_acquire_releases_the_stream_it_lands(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stop that begins while a claim's acquire is on its way: the acquire lands and the
    worker releases the stream itself (cancelled with the claiming loops, the claim never
    reached its start, and the stream stayed owned by the ended session)."""
    conn_id = f"{unique_id}-stopclaim"
    landed, answer = threading.Event(), threading.Event()
    async with running_worker(fleet, Recorder()) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        store, acquire = run.worker.store, run.worker.store.acquire

        def slow_answer(conn: str, owner: str, **kwargs: Any) -> Lease:
            lease = acquire(conn, owner, **kwargs)  # the real write, answered late
            if conn == conn_id:
                landed.set()
                answer.wait(10)
            return lease

        store.acquire = slow_answer  # type: ignore[method-assign]
        fleet.create(conn_id, upstream.url(conn_id))
        fleet.nudge(conn_id)
        assert await asyncio.to_thread(landed.wait, 10), "the acquire never landed"
        run.stop.set()
        await asyncio.sleep(0.3)  # the stop has cancelled the claiming loops
        answer.set()
        await asyncio.wait_for(run.task, 30)
    item = fleet.item(conn_id)
    assert "lease_owner" not in item, item.get("lease_owner")
    assert run.worker.counts["released"] == 1


async def test_a_nudge_for_a_stream_of_ours_past_its_fence_is_handed_on(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """Our stream past its fence, not yet stopped (a worker resumed from a pause, before its
    fence watcher's next look): its nudge is for the next holder, handed on, not deleted."""
    conn_id = f"{unique_id}-fenced"
    fleet.create(conn_id, upstream.url(conn_id))
    fence = [monotonic_ms() + 60_000]
    alone = holdings_alone(fleet, session_fence=lambda: fence[0])
    holdings, rec = alone.holdings, alone.rec
    assert await holdings.claim(conn_id) is Claim.CLAIMED
    await async_wait_until(lambda: rec.seqs(conn_id), 10, "delivering")
    assert await holdings.claim(conn_id, "nudge") is Claim.CONFLICT  # a duplicate: ours
    fence[0] = monotonic_ms() - 1
    assert await holdings.claim(conn_id, "nudge") is Claim.REFUSED
    holdings.streams[conn_id].drain_to(None, SHED)
    await async_wait_until(lambda: not holdings.streams, 5, "the stream let go")
