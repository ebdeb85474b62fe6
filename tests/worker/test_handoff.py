"""Handoffs between in-process workers: a stream let go goes to the successor the decider named,
claimed from its order queue well inside the hold, with no seq lost."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from holdfast.core import rules
from holdfast.core.directives import Directive
from holdfast.core.exceptions import SessionLost
from holdfast.core.handoff import (
    TAKE,
    TAKE_CHECK_MS,
    TAKE_LOOK_EVERY_MS,
    TAKE_LOOK_FOR_MS,
    WARM_TIMEOUT_MS,
)
from holdfast.core.model import LeaseItem, StoredItem
from holdfast.core.schema import ATTR, PK_PREFIX
from holdfast.core.sessions import SessionItem
from holdfast.core.store import wall_clock_ms
from holdfast.worker.handler import Message
from holdfast.worker.prefetch import Prefetch
from holdfast.worker.warmup import WarmUp
from tests.worker.conftest import (
    Fleet,
    RouterSim,
    UpstreamThread,
    async_wait_until,
    missing_seqs,
)
from tests.worker.helpers import (
    DeciderSim,
    Recorder,
    claim_directly,
    running_worker,
    start_held,
)


async def test_a_shed_stream_goes_to_the_named_successor_within_the_hold(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A sheds two streams naming B: B claims both before the hold ends; C, with room and no
    name, gets none."""
    rec, conns = Recorder(), [f"{unique_id}-h{i}" for i in range(4)]
    router = RouterSim(fleet)
    try:
        async with running_worker(fleet, rec, HOLDFAST_REBALANCE_COOLDOWN_SECONDS="0") as a:
            await start_held(fleet, upstream, a, conns)
            async with running_worker(fleet, rec) as b, running_worker(fleet, rec) as c:
                await async_wait_until(lambda: b.worker.owner and c.worker.owner, 5,
                                       "sessions")
                assert a.worker.owner and b.worker.owner
                until = wall_clock_ms() + 20_000
                t0 = time.monotonic()
                assert fleet.sessions().set_directive(a.worker.owner, Directive(
                    2, 2, 2, until, 3, wall_clock_ms(), successors=((b.worker.owner, 2),)))
                await async_wait_until(lambda: len(b.worker.streams) == 2, 10, "B takes two")
                took_s = time.monotonic() - t0
                # A's side of each handoff ends after the TAKE it sent (its socket's close
                # handshake), so B may hold a stream a moment before A has let go of it.
                await async_wait_until(lambda: len(a.worker.streams) == 2, 5, "A keeps two")
                assert not c.worker.streams
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
                    6, 6, 0, wall_clock_ms() + 20_000, 3, wall_clock_ms(),
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


async def test_a_stop_with_no_target_asks_the_decider_and_hands_its_streams_over_warm(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A balanced fleet has no live target, so a SIGTERM had no successor: the stopping
    worker marks itself draining, the decider names the other worker at once, and every
    stream goes to it warm, none lost."""
    rec, conns = Recorder(), [f"{unique_id}-q{i}" for i in range(6)]
    router: RouterSim | None = None
    decider: DeciderSim | None = None
    try:
        async with running_worker(fleet, rec) as b:
            async with running_worker(fleet, rec) as a:
                await async_wait_until(lambda: a.worker.owner and b.worker.owner, 5,
                                       "sessions")
                for i, x in enumerate(conns):
                    fleet.create(x, upstream.url(x))
                    await (a if i % 2 else b).worker.holdings.claim(x)
                router = RouterSim(fleet)
                # Balanced as the decider sees it (its first decision writes no target).
                await async_wait_until(lambda: sorted(
                    i.held for i in fleet.sessions().scan()
                    if isinstance(i, SessionItem)) == [3, 3], 10, "heartbeats say 3 and 3")
                decider = DeciderSim(fleet)
                await async_wait_until(lambda: decider.rounds and all(
                    len(rec.seqs(x)) >= 3 for x in conns), 10, "a decision, messages")
                assert decider.rounds[0].balanced and a.worker.balancing.live_directive() is None
            await async_wait_until(lambda: len(b.worker.streams) == 6, 10, "all six on B")
            assert a.worker.metrics.totals["StreamsHandedOff"] == 3
            await async_wait_until(lambda: all(len(rec.seqs(x)) >= 8 for x in conns), 10,
                                   "messages after the stop")
    finally:
        for sim in (router, decider):
            if sim is not None:
                sim.stop()
    for x in conns:
        assert missing_seqs(rec.seqs(x)) == [], x


class TimedRecorder(Recorder):
    """Also records when (monotonic s) and by which worker each message was handled."""

    def __init__(self) -> None:
        super().__init__()
        self.when: list[tuple[str, int | None, str, float]] = []
        self.calls_until = 0  # how many of ``when`` the test looks at

    async def __call__(self, message: Message) -> None:
        await super().__call__(message)
        self.when.append((message.conn_id, message.seq, message.worker_id, time.monotonic()))

    def switch_gap_s(self, conn_id: str) -> float:
        """From the first deliverer's last message to the next deliverer's first."""
        rows = [r for r in self.when[:self.calls_until] if r[0] == conn_id]
        first = rows[0][2]
        last_old = max(t for c, _, w, t in rows if w == first)
        first_new = min(t for c, _, w, t in rows if w != first)
        return first_new - last_old


def _count_reads(store: Any, reads: Counter[str]) -> None:
    """Count ``store``'s item reads per stream from now on, one by one and in batches (the
    store itself unchanged)."""
    read, batch = store.get_raw, store.client.batch_get_item

    def counted(conn_id: str) -> Any:
        reads[conn_id] += 1
        return read(conn_id)

    def counted_batch(**kwargs: Any) -> Any:
        for keys in kwargs["RequestItems"].values():
            for key in keys["Keys"]:
                reads[key[ATTR.pk]["S"].removeprefix(PK_PREFIX)] += 1
        return batch(**kwargs)

    store.get_raw = counted
    store.client.batch_get_item = counted_batch


async def _shed_two(fleet: Fleet, upstream: UpstreamThread, unique_id: str,
                    rec: TimedRecorder, *, reads: Counter[str] | None = None,
                    with_router: bool = True, drop_takes: bool = False,
                    **a_env: str) -> tuple[dict[str, int], list[str]]:
    """A holds four and sheds two naming B; returns A's counts and the moved streams
    (``reads``: B's item reads per stream; ``with_router=False``: no stream records are
    routed, only the workers' own messages move anything; ``drop_takes``: A's TAKE messages
    are never sent)."""
    conns = [f"{unique_id}-w{i}" for i in range(4)]
    router = RouterSim(fleet) if with_router else None
    try:
        async with running_worker(fleet, rec, HOLDFAST_REBALANCE_COOLDOWN_SECONDS="0",
                                  HOLDFAST_WORKER_ID=f"a-{unique_id}", **a_env) as a:
            await start_held(fleet, upstream, a, conns)
            await async_wait_until(lambda: all(len(rec.seqs(c)) >= 3 for c in conns), 10,
                                   "messages")
            if drop_takes:
                send = a.worker.handoffs._send
                a.worker.handoffs._send = (  # type: ignore[method-assign]
                    lambda peer, step: None if step.kind == TAKE else send(peer, step))
            async with running_worker(fleet, rec, HOLDFAST_WORKER_ID=f"b-{unique_id}") as b:
                await async_wait_until(lambda: b.worker.owner, 5, "B's session")
                assert a.worker.owner and b.worker.owner
                if reads is not None:
                    _count_reads(b.worker.store, reads)
                assert fleet.sessions().set_directive(a.worker.owner, Directive(
                    2, 2, 2, wall_clock_ms() + 20_000, 2, wall_clock_ms(),
                    successors=((b.worker.owner, 2),)))
                await async_wait_until(lambda: len(b.worker.streams) == 2, 10, "B takes two")
                moved = sorted(b.worker.streams)
                await async_wait_until(lambda: all(sum(
                    1 for c, _, w, _ in rec.when if c == x and w == f"b-{unique_id}") >= 5
                    for x in moved), 10, "B's messages after the handoff")
                counts = dict(a.worker.counts)
                # What B's own stop hands back to A after this is another move.
                rec.calls_until = len(rec.when)
    finally:
        if router is not None:
            router.stop()
    return counts, moved


async def test_a_warm_handoff_switches_deliverer_once_with_a_short_gap(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """Make-before-break: B warms up while A delivers; the lease passes in one write; each
    moved stream's deliveries switch from A to B once, no seq twice or missing; B reads each
    item to warm up and, after READY, looks for the transfer a bounded number of times."""
    rec, reads = TimedRecorder(), Counter[str]()
    counts, moved = await _shed_two(fleet, upstream, unique_id, rec, reads=reads)
    assert counts.get("handed_over") == 2 and not counts.get("released")
    looks_at_most = TAKE_LOOK_FOR_MS // TAKE_LOOK_EVERY_MS + 1
    assert all(1 <= reads[x] <= 1 + looks_at_most for x in moved), reads
    for x in moved:
        seqs = rec.seqs(x)
        assert missing_seqs(seqs) == [] and len(seqs) == len(set(seqs)), x
        deliverers = [w for c, _, w, _ in rec.when[:rec.calls_until] if c == x]
        switches = sum(1 for p, q in itertools.pairwise(deliverers) if p != q)
        assert switches == 1, x
        # In process, on moto and DynamoDB Local: a drain, one write, one SQS message.
        assert rec.switch_gap_s(x) < 0.5, (x, rec.switch_gap_s(x))


async def test_a_successor_finds_the_transfer_in_the_table_before_its_take(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A's TAKE messages never arrive: B's looks after READY find each transfer and start the
    stream well inside TAKE_CHECK_MS (the once-a-second look), no seq twice or missing."""
    rec = TimedRecorder()
    counts, moved = await _shed_two(fleet, upstream, unique_id, rec, drop_takes=True)
    assert counts.get("handed_over") == 2
    for x in moved:
        seqs = rec.seqs(x)
        assert missing_seqs(seqs) == [] and len(seqs) == len(set(seqs)), x
        assert rec.switch_gap_s(x) < 0.5 * TAKE_CHECK_MS / 1000, (x, rec.switch_gap_s(x))


async def test_one_connection_at_a_time_hands_over_break_before_make(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """HOLDFAST_SINGLE_CONNECTION: B reserves a slot (RESERVE) without connecting; A closes its
    socket, then passes the lease in one write and B connects on TAKE: the upstream never sees
    two connections of a stream at once, no acquire by B, nothing lost or twice."""
    rec = TimedRecorder()
    counts, moved = await _shed_two(fleet, upstream, unique_id, rec,
                                    HOLDFAST_SINGLE_CONNECTION="1")
    assert counts.get("handed_over") == 2 and not counts.get("released"), counts
    assert upstream.server.connlog.overlaps() == []
    for x in moved:
        seqs = rec.seqs(x)
        assert missing_seqs(seqs) == [] and len(seqs) == len(set(seqs)), x


async def test_a_named_release_reaches_its_successor_without_the_router(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stop whose budget leaves no time for a handoff (4 s: the drain deadline comes before
    a warm-up could time out) releases naming B; with no stream records routed at all, the
    holder's own nudge on B's order queue gets both streams claimed by B."""
    rec, conns = Recorder(), [f"{unique_id}-n{i}" for i in range(2)]
    async with running_worker(fleet, rec) as b:
        await async_wait_until(lambda: b.worker.owner, 5, "B's session")
        async with running_worker(fleet, rec, HOLDFAST_SHUTDOWN_SECONDS="4") as a:
            await claim_directly(fleet, upstream, a, conns)
            await async_wait_until(lambda: all(len(rec.seqs(c)) >= 3 for c in conns), 10,
                                   "messages")
            assert b.worker.owner
            a.worker.balancing.update(Directive(
                2, 2, 0, wall_clock_ms() + 30_000, 2, wall_clock_ms(),
                successors=((b.worker.owner, 2),)))
        counts = dict(a.worker.counts)
        await async_wait_until(lambda: all(c in b.worker.streams for c in conns), 10,
                               "B claims both")
        await async_wait_until(lambda: all(len(rec.seqs(c)) >= 8 for c in conns), 10,
                               "B's messages")
    assert counts.get("released") == 2 and not counts.get("handed_over"), counts
    for c in conns:
        assert missing_seqs(rec.seqs(c)) == [], c


async def test_a_successor_that_never_answers_costs_a_named_release_not_the_stream(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The named successor has no order queue (gone): A delivers on through the warm-up wait,
    then drains and releases it to whoever has room (no hold for a successor that failed),
    nothing lost."""
    rec, conn = TimedRecorder(), f"{unique_id}-g"
    gone = fleet.sessions().start(f"gone-{unique_id}", 10).owner
    router = RouterSim(fleet)
    try:
        async with running_worker(fleet, rec, HOLDFAST_REBALANCE_COOLDOWN_SECONDS="0") as a:
            await start_held(fleet, upstream, a, [conn])
            assert a.worker.owner
            t0 = time.monotonic()
            assert fleet.sessions().set_directive(a.worker.owner, Directive(
                0, 0, 1, wall_clock_ms() + 20_000, 2, wall_clock_ms(), successors=((gone, 1),)))
            await async_wait_until(lambda: conn not in a.worker.streams, 10, "A let it go")
            waited_s = time.monotonic() - t0
            item = fleet.item(conn)
            assert "successor" not in item  # a plain release (it may be claimed already)
            async with running_worker(fleet, rec) as c:
                # Whoever polls the fallback nudge first (A's refusal covers moves only).
                await async_wait_until(lambda: conn in c.worker.streams
                                       or conn in a.worker.streams, 15,
                                       "taken again")
                await async_wait_until(lambda: len(rec.seqs(conn)) >= 40, 10, "messages")
    finally:
        router.stop()
    assert waited_s >= WARM_TIMEOUT_MS / 1000 - 0.5  # it delivered while it waited
    assert missing_seqs(rec.seqs(conn)) == []
    assert len(rec.seqs(conn)) == len(set(rec.seqs(conn)))


async def _stop_naming(fleet: Fleet, upstream: UpstreamThread, rec: Recorder, conns: list[str],
                       successors: Callable[[str], tuple[tuple[str, int], ...]], *,
                       shutdown_s: str, fleet_size: int) -> tuple[dict[str, int], dict[str, int]]:
    """A holds ``conns`` and stops with a live target naming ``successors(B's owner)``; every
    stream ends with B, none lost. A's metric totals and counts at its stop's end."""
    router: RouterSim | None = None
    n = len(conns)
    try:
        async with running_worker(fleet, rec) as b:
            await async_wait_until(lambda: b.worker.owner, 5, "B's session")
            async with running_worker(fleet, rec, HOLDFAST_SHUTDOWN_SECONDS=shutdown_s) as a:
                await claim_directly(fleet, upstream, a, conns)
                router = RouterSim(fleet)
                await async_wait_until(lambda: all(len(rec.seqs(x)) >= 3 for x in conns), 15,
                                       "messages")
                assert a.worker.owner and b.worker.owner
                a.worker.balancing.update(Directive(
                    n, n, 0, wall_clock_ms() + 30_000, fleet_size, wall_clock_ms(),
                    successors=successors(b.worker.owner)))
            totals, counts = dict(a.worker.metrics.totals), dict(a.worker.counts)
            await async_wait_until(lambda: len(b.worker.streams) == n, 10, f"all {n} with B")
            await async_wait_until(lambda: all(len(rec.seqs(x)) >= 8 for x in conns), 10,
                                   "messages after the stop")
    finally:
        if router is not None:
            router.stop()
    for x in conns:
        assert missing_seqs(rec.seqs(x)) == [], x
    return totals, counts


async def test_a_stops_warm_handoff_that_fails_is_released_to_another_named_successor(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stopping worker whose warm handoff to one named successor gets no answer (that
    worker is gone) releases the stream naming the next successor of its list, not to
    whoever polls first (in a deploy, maybe another old worker); none lost."""
    rec, conns = Recorder(), [f"{unique_id}-f{i}" for i in range(2)]
    gone = fleet.sessions().start(f"gone-{unique_id}", 10).owner
    # B first (the larger count), then the gone one; B has one name left.
    totals, _ = await _stop_naming(fleet, upstream, rec, conns,
                                   lambda b: ((gone, 1), (b, 2)), shutdown_s="12", fleet_size=3)
    # One warm handoff to B, one release naming B after the gone one's wait ran out.
    assert totals.get("StreamsHandedOff") == 2, totals


async def test_a_stop_hands_more_streams_warm_than_it_has_in_flight_at_once(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stopping worker with 25 streams (20 warm handoffs in flight at most): all 25 go
    over warm to the named successor, the last five as the first ones end; none lost."""
    rec, conns = Recorder(), [f"{unique_id}-m{i:02d}" for i in range(25)]
    _, counts = await _stop_naming(fleet, upstream, rec, conns, lambda b: ((b, 25),),
                                   shutdown_s="20", fleet_size=2)
    assert counts.get("handed_over") == 25 and not counts.get("released"), counts


async def test_a_lost_session_closes_its_warm_ups(fleet: Fleet, upstream: UpstreamThread,
                                                  unique_id: str) -> None:
    """A warm-up was for the session that was asked: when that session is lost the socket is
    closed at once, not left open waiting for a TAKE addressed to the old owner."""
    conn = f"{unique_id}-warm"
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, Recorder()) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        ctx = run.worker.holdings.ctx
        item = LeaseItem.from_ddb(fleet.item(conn))
        prefetch = Prefetch.for_stream(conn, item.ws_url, None, ctx)
        await prefetch.open()
        warming = run.worker.handoffs.warm_ups.warming
        warming[conn] = WarmUp(prefetch, "holder#1", 1, 2**62,
                               StoredItem(item, fleet.item(conn)), run.worker.owner or "")
        run.worker.stopping = True  # no new incarnation after it: the old one is live here
        await run.worker.session_lost(SessionLost(ctx.worker_id, "old", "test"))
        assert not warming
        await async_wait_until(lambda: all(
            r.closed_ns is not None for r in upstream.server.connlog.records(conn)), 5,
            "the warm socket closed")


async def test_a_handoff_step_that_fails_is_logged(fleet: Fleet,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A spawned handoff step (a TAKE, a warm-up) that raises is logged with its error when it
    ends: nobody awaits it (it surfaced only as "exception never retrieved" at GC, if at all)."""
    async def broken() -> None:
        raise RuntimeError("a bug in a step")

    async with running_worker(fleet, Recorder()) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        run.worker.handoffs._spawn(broken())
        await async_wait_until(lambda: "a handoff step failed" in caplog.text, 5, "logged")
    assert [getattr(r, "error", None) for r in caplog.records
            if r.getMessage() == "a handoff step failed"] == ["RuntimeError: a bug in a step"]
