"""Handoffs between in-process workers: a stream let go goes to the successor the decider named,
claimed from its order queue well inside the hold, with no seq lost."""

from __future__ import annotations

import time

from holdfast.core import rules
from holdfast.core.directives import Directive
from tests.worker.conftest import (
    Fleet,
    RouterSim,
    UpstreamThread,
    async_wait_until,
    missing_seqs,
)
from tests.worker.helpers import Recorder, running_worker


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_a_shed_stream_goes_to_the_named_successor_within_the_hold(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A sheds two streams naming B: B claims both before the hold ends; C, with room and no
    name, gets none."""
    rec, conns = Recorder(), [f"{unique_id}-h{i}" for i in range(4)]
    router = RouterSim(fleet)
    try:
        async with running_worker(fleet, rec, HOLDFAST_REBALANCE_COOLDOWN_SECONDS="0") as a:
            for c in conns:
                fleet.create(c, upstream.url(c))
                fleet.nudge(c)
            await async_wait_until(lambda: len(a.worker.streams) == 4, 10, "A holds four")
            async with running_worker(fleet, rec) as b, running_worker(fleet, rec) as c:
                await async_wait_until(lambda: b.worker.owner and c.worker.owner, 5,
                                       "sessions")
                assert a.worker.owner and b.worker.owner
                until = _now_ms() + 20_000
                t0 = time.monotonic()
                assert fleet.sessions().set_directive(a.worker.owner, Directive(
                    2, 2, 2, until, 3, _now_ms(), successors=((b.worker.owner, 2),)))
                await async_wait_until(lambda: len(b.worker.streams) == 2, 10, "B takes two")
                took_s = time.monotonic() - t0
                assert len(a.worker.streams) == 2 and not c.worker.streams
                assert a.worker.metrics.totals["StreamsHandedOff"] == 2
                moved = set(b.worker.streams)
                await async_wait_until(lambda: all(len(rec.seqs(x)) >= 5 for x in moved), 10,
                                       "messages after the handoff")
    finally:
        router.stop()
    # A's wait for its directive (the next heartbeat at most), two releases and two claims;
    # without the order queue's nudge B would only see them after the hold.
    assert took_s < rules.HANDOFF_HOLD_MS / 1000
    for x in moved:
        assert missing_seqs(rec.seqs(x)) == [], x


async def test_a_stopping_worker_hands_its_streams_to_the_named_successors(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A graceful stop (SIGTERM) with successors named: every stream goes to them, split as
    the decider said, none to the unnamed worker, none lost."""
    rec, conns = Recorder(), [f"{unique_id}-s{i}" for i in range(6)]
    router: RouterSim | None = None
    try:
        async with running_worker(fleet, rec) as b, running_worker(fleet, rec) as c:
            await async_wait_until(lambda: b.worker.owner and c.worker.owner, 5, "sessions")
            async with running_worker(fleet, rec) as a:
                await async_wait_until(lambda: a.worker.owner, 5, "A's session")
                for x in conns:
                    fleet.create(x, upstream.url(x))
                # Claimed by A directly, before any router runs: nobody is nudged.
                for x in conns:
                    await a.worker.holdings.claim(x)
                assert len(a.worker.streams) == 6
                router = RouterSim(fleet)
                await async_wait_until(lambda: all(len(rec.seqs(x)) >= 3 for x in conns), 10,
                                       "messages")
                assert a.worker.owner and b.worker.owner and c.worker.owner
                a.worker.balancing.update(Directive(
                    6, 6, 0, _now_ms() + 20_000, 3, _now_ms(),
                    successors=((b.worker.owner, 4), (c.worker.owner, 2))))
                t0 = time.monotonic()
            await async_wait_until(lambda: len(b.worker.streams) + len(c.worker.streams) == 6,
                                   10, "all six taken over")
            took_s = time.monotonic() - t0
            assert (len(b.worker.streams), len(c.worker.streams)) == (4, 2)
            await async_wait_until(lambda: all(len(rec.seqs(x)) >= 8 for x in conns), 10,
                                   "messages after the stop")
    finally:
        if router is not None:
            router.stop()
    assert took_s < rules.HANDOFF_HOLD_MS / 1000
    for x in conns:
        assert missing_seqs(rec.seqs(x)) == [], x
