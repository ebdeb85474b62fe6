"""The checkpoint writer: its reactions to lost streams, on DynamoDB Local with real leases, and
its spreading of each period's writes over slices (injected clock and sleep)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from holdfast.core.exceptions import LeaseLost, LossReason
from holdfast.core.model import Lease
from holdfast.core.rules import LeaseTiming, checkpoint_slice, checkpoint_slices
from holdfast.core.schema import BACKSTOP_MS
from holdfast.core.store import LeaseStore
from holdfast.worker.balancing import HANDOFF
from holdfast.worker.checkpointer import Checkpointer
from holdfast.worker.connection import Connection
from holdfast.worker.context import ConnectionContext
from holdfast.worker.held import NO_FENCE_MS, REGRESSED, HeldState, HeldStream
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.protocol import QueryParamProtocol
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until
from tests.worker.helpers import Recorder, item_attr, running_worker


def runner_for(fleet: Fleet, conn: str, checkpoint: int) -> tuple[Checkpointer, Connection]:
    fleet.create(conn, "ws://127.0.0.1:1/s/x")
    store = LeaseStore(fleet.ddb, fleet.table, lease_ms=BACKSTOP_MS, skew_ms=300)
    lease = store.acquire(conn, "me")
    ctx = ConnectionContext(worker_id="me", handler=Recorder(), protocol=QueryParamProtocol(),
                        metrics=WorkerMetrics())
    held = HeldStream(lease, fence_mono_ms=NO_FENCE_MS)
    held.cursor.anchored(checkpoint)
    runner = Connection(held, ctx)
    writer = Checkpointer(store, {conn: runner}, LeaseTiming(3000, 500, 300, 300), ctx.metrics)
    return writer, runner


async def test_a_foreign_checkpoint_stops_the_stream_still_ours(fleet: Fleet,
                                                                unique_id: str) -> None:
    """A stored checkpoint ahead of anything we handled means someone else wrote it: stop
    at once, not as a loss (the owner and epoch are ours: its release follows)."""
    conn = f"{unique_id}-b"
    writer, runner = runner_for(fleet, conn, 7)
    fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                          UpdateExpression="SET last_seq = :s",
                          ExpressionAttributeValues={":s": {"N": "1000"}})
    # The real path: the checkpoint write fails, the store classifies it, on_lost acts.
    await writer.write()
    assert runner.held.state is HeldState.ABORTED and runner.held.stop_reason == REGRESSED
    assert not writer.metrics.totals["LeasesLost"]
    assert item_attr(fleet.item(conn), "last_seq") == 1000  # nothing written over it


async def test_a_stream_draining_for_its_handoff_is_not_checkpointed_nor_lost(
        fleet: Fleet, unique_id: str) -> None:
    """Between READY and its transfer a stream is not checkpointed (the transfer writes the
    last one), and a loss met by a write already in flight is the transfer's own: the
    stream is neither aborted nor counted lost (aborting it swallowed the successor's TAKE)."""
    conn = f"{unique_id}-h"
    writer, runner = runner_for(fleet, conn, 7)
    runner.held.drain(HANDOFF)
    store = LeaseStore(fleet.ddb, fleet.table, lease_ms=BACKSTOP_MS, skew_ms=300)
    store.transfer(runner.held.lease, runner.held.checkpoint, "successor#abc123")
    await writer.write()
    assert item_attr(fleet.item(conn), "lease_owner") == "successor#abc123"
    writer.on_lost(runner, LeaseLost(conn, LossReason.LOST, None))
    assert runner.held.state is not HeldState.LOST and not writer.metrics.totals["LeasesLost"]


async def test_checkpoint_moved_ahead_by_an_operator_stops_and_releases_the_stream(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """An edit that moves last_seq past the holder's checkpoint makes the holder stop and
    release the stream at once, keeping the edit (it waited for the strays pass, owned)."""
    conn, rec = f"{unique_id}-op", Recorder()
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, rec) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 10, "messages")
        fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                              UpdateExpression="SET last_seq = :s",
                              ExpressionAttributeValues={":s": {"N": "1000000"}})
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "stream stopped")
        await async_wait_until(lambda: item_attr(fleet.item(conn), "lease_owner") is None, 5,
                               "released")
    assert item_attr(fleet.item(conn), "last_seq") == 1000000


async def test_anchors_asked_for_together_are_written_in_one_call(
        fleet: Fleet, unique_id: str) -> None:
    """Forty new streams' first checkpoints asked for at once cost one renew_many call (two
    batch writes), not forty writes queued on the checkpoint threads; each is stored."""
    store = LeaseStore(fleet.ddb, fleet.table, lease_ms=BACKSTOP_MS, skew_ms=300)
    metrics = WorkerMetrics()
    ctx = ConnectionContext(worker_id="me", handler=Recorder(), protocol=QueryParamProtocol(),
                            metrics=metrics)
    conns = {}
    for i in range(40):
        conn = f"{unique_id}-a{i}"
        fleet.create(conn, "ws://127.0.0.1:1/s/x")
        conns[conn] = Connection(HeldStream(store.acquire(conn, "me"),
                                            fence_mono_ms=NO_FENCE_MS), ctx)
    writer = Checkpointer(store, conns, LeaseTiming(3000, 500, 300, 300), metrics)
    calls = []
    real = writer._renew

    async def counting(held: list[Connection], *args: object) -> list[bool]:
        calls.append(len(held))
        return await real(held, *args)  # type: ignore[arg-type]

    writer._renew = counting  # type: ignore[method-assign]
    landed = await asyncio.gather(*(writer.anchor(c, 5 + i)
                                    for i, c in enumerate(conns.values())))
    assert calls == [40] and all(landed)
    for i, conn in enumerate(conns):
        assert item_attr(fleet.item(conn), "last_seq") == 5 + i
        assert conns[conn].held.lease.last_seq == 5 + i



class Ticks:
    """A fake monotonic clock and sleep for ``Checkpointer.run``: each sleep moves the clock on
    by its length, calls ``between`` with the next tick's number (the streams may change
    there) and ends the run after ``ticks`` ticks."""

    def __init__(self, ticks: int, between: Callable[[int], None] = lambda tick: None) -> None:
        self.now_ms, self.ticks, self.between = 0, ticks, between
        self.sleeps: list[float] = []

    @property
    def tick(self) -> int:
        return len(self.sleeps)

    def mono(self) -> int:
        return self.now_ms

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_ms += round(seconds * 1000)
        if self.tick == self.ticks:
            raise asyncio.CancelledError
        self.between(self.tick)


def written_ticks(writer: Checkpointer, ticks: Ticks, write: bool = False) -> dict[str, list[int]]:
    """The ticks at which each stream is sent to ``renew_many`` (``write``: and written; else
    only recorded), filled in as ``writer`` runs."""
    written: dict[str, list[int]] = {}
    real = writer._renew

    async def record(held: list[Connection], *args: object) -> list[bool]:
        for c in held:
            written.setdefault(c.held.lease.conn_id, []).append(ticks.tick)
        if write:
            return await real(held, *args)  # type: ignore[arg-type]
        return [True] * len(held)

    writer._renew = record  # type: ignore[method-assign]
    return written


def a_context() -> ConnectionContext:
    return ConnectionContext(worker_id="me", handler=Recorder(), protocol=QueryParamProtocol(),
                             metrics=WorkerMetrics())


def fake_stream(conn: str, ctx: ConnectionContext) -> Connection:
    """A held stream with a fresh backstop (at wall time 0), for a writer that only records."""
    held = HeldStream(Lease(conn, "me", 1, BACKSTOP_MS, "ws://127.0.0.1:1/s/x", None),
                      fence_mono_ms=NO_FENCE_MS)
    held.cursor.anchored(1)
    return Connection(held, ctx)


def recording_writer(streams: dict[str, Connection], checkpoint_ms: int, ticks: Ticks,
                     ctx: ConnectionContext) -> tuple[Checkpointer, dict[str, list[int]]]:
    """A writer on fake streams that records what it would write (no store: only its backstop
    length is read)."""
    store = SimpleNamespace(lease_ms=BACKSTOP_MS)
    writer = Checkpointer(store, streams, LeaseTiming(3000, 500, 300, 300),  # type: ignore[arg-type]
                          ctx.metrics, mono=ticks.mono, checkpoint_ms=checkpoint_ms,
                          wall=lambda: 0, sleep=ticks.sleep)
    return writer, written_ticks(writer, ticks)


async def test_checkpoints_are_spread_over_ten_slices_at_the_default_period(
        fleet: Fleet, unique_id: str) -> None:
    """At 20 s a tick every 2 s writes about a tenth of the streams: each stream exactly once
    per period, ten ticks apart, and every checkpoint is stored."""
    store = LeaseStore(fleet.ddb, fleet.table, lease_ms=BACKSTOP_MS, skew_ms=300)
    ctx = a_context()
    conns = {}
    for i in range(30):
        conn = f"{unique_id}-s{i}"
        fleet.create(conn, "ws://127.0.0.1:1/s/x")
        held = HeldStream(store.acquire(conn, "me"), fence_mono_ms=NO_FENCE_MS)
        held.cursor.anchored(100 + i)
        conns[conn] = Connection(held, ctx)
    ticks = Ticks(20)
    writer = Checkpointer(store, conns, LeaseTiming(3000, 500, 300, 300), ctx.metrics,
                          mono=ticks.mono, sleep=ticks.sleep)  # checkpoint_ms: the default
    written = written_ticks(writer, ticks, write=True)
    with pytest.raises(asyncio.CancelledError):
        await writer.run()
    assert checkpoint_slices(20_000) == 10 and ticks.sleeps == [2.0] * 20
    for conn in conns:
        first = checkpoint_slice(conn, 10)
        assert written[conn] == [first, first + 10], conn
    per_tick = [sum(t in w for w in written.values()) for t in range(10)]
    assert max(per_tick) < 30 and sum(per_tick) == 30  # never every stream at once
    for i, conn in enumerate(conns):
        assert item_attr(fleet.item(conn), "last_seq") == 100 + i


@pytest.mark.parametrize("checkpoint_ms", [100, 500, 3_999])
async def test_short_periods_keep_one_slice(checkpoint_ms: int) -> None:
    """Under 4 s the period is one slice: every tick, one period apart, writes every stream."""
    ctx = a_context()
    streams = {f"c{i}": fake_stream(f"c{i}", ctx) for i in range(12)}
    ticks = Ticks(4)
    writer, written = recording_writer(streams, checkpoint_ms, ticks, ctx)
    with pytest.raises(asyncio.CancelledError):
        await writer.run()
    assert checkpoint_slices(checkpoint_ms) == 1
    assert ticks.sleeps == [checkpoint_ms / 1000] * 4
    assert written == {conn: [0, 1, 2, 3] for conn in streams}


async def test_streams_that_come_and_go_are_written_once_per_period() -> None:
    """With streams joining and leaving between ticks, a stream is written within a period of
    joining, then exactly once in every period it stays, and never once it has left."""
    ctx = a_context()
    streams = {f"c{i}": fake_stream(f"c{i}", ctx) for i in range(40)}
    joined = dict.fromkeys(streams, 0)
    left: dict[str, int] = {}
    count = iter(range(40, 10_000))

    def churn(tick: int) -> None:
        for _ in range(3):
            conn = f"c{next(count)}"
            streams[conn], joined[conn] = fake_stream(conn, ctx), tick
        for conn in sorted(streams)[tick % 5:tick % 5 + 2]:
            del streams[conn]
            left[conn] = tick

    ticks = Ticks(60, churn)
    writer, written = recording_writer(streams, 20_000, ticks, ctx)
    with pytest.raises(asyncio.CancelledError):
        await writer.run()
    held_a_period = [c for c, start in joined.items() if left.get(c, 60) - start >= 10]
    assert len(left) > 100 and len(held_a_period) > 100
    for conn, start in joined.items():
        end = left.get(conn, 60)  # the stream is held at ticks start .. end - 1
        at = written.get(conn, [])
        assert all(start <= t < end for t in at), (conn, start, end, at)
        for window in range(start, end - 9):  # every full period it is held in
            assert sum(window <= t < window + 10 for t in at) == 1, (conn, start, end, at)


async def test_while_the_table_throttles_a_round_puts_off_the_streams_whose_backstop_is_not_due(
        ) -> None:
    """Ticks 1 to 4 come while DynamoDB refuses calls as throttled: the stream whose backstop
    is due is written every round; the others are put off, but never twice in a row."""
    ctx = a_context()
    streams = {f"c{i}": fake_stream(f"c{i}", ctx) for i in range(3)}
    due = HeldStream(Lease("c3", "me", 1, BACKSTOP_MS // 4, "ws://127.0.0.1:1/s/x", None),
                     fence_mono_ms=NO_FENCE_MS)
    due.cursor.anchored(1)
    streams["c3"] = Connection(due, ctx)
    ticks = Ticks(6)
    writer, written = recording_writer(streams, 1_000, ticks, ctx)
    writer.throttled = lambda: ticks.tick in (1, 2, 3, 4)
    with pytest.raises(asyncio.CancelledError):
        await writer.run()
    assert written == {"c0": [0, 2, 4, 5], "c1": [0, 2, 4, 5], "c2": [0, 2, 4, 5],
                       "c3": [0, 1, 2, 3, 4, 5]}


def test_a_streams_fence_follows_the_backstop_its_store_writes() -> None:
    """A stream's own fence and its backstop refresh follow the length its store writes (the
    one definition): a store of a 3 s backstop gives a fence 3 s out, not an hour's."""
    from holdfast.core import rules

    timing = LeaseTiming(3000, 500, 300, 300)
    writer = Checkpointer(SimpleNamespace(lease_ms=3_000), {}, timing,  # type: ignore[arg-type]
                          WorkerMetrics(), wall=lambda: 0)
    assert writer.fence_after(0) == rules.fence_deadline_mono_ms(0, timing, length_ms=3_000)
    lease = Lease("c", "me", 1, 2_000, "ws://127.0.0.1:1/s/x", None)
    assert not writer._backstop_due(lease)  # 2 s left of 3: not half gone yet
