"""Poison frames: unparseable, absurd seq jumps, and frames that kill the connection."""

from __future__ import annotations

import asyncio
import json

from holdfast.core.store import LeaseStore
from tests.worker.conftest import Fleet, async_wait_until
from tests.worker.helpers import Recorder, item_attr
from tests.worker.scripted import scripted_upstream
from tests.worker.test_connection import connection, context, lease_for, run_until
from worker.backoff import Backoff
from worker.connection import Connection, ConnectOptions

DEEP = '{"a": ' * 20_000 + "1" + "}" * 20_000  # RecursionError in json.loads


def seqs(first: int, last: int) -> list[str]:
    return [json.dumps({"seq": n}) for n in range(first, last + 1)]


async def test_unparseable_frames_pass_and_later_frames_flow(fleet: Fleet,
                                                             unique_id: str) -> None:
    """Deep nesting and non-JSON text reach the handler without a seq, once counted each."""
    conn, rec = f"{unique_id}-deep", Recorder()
    frames = [*seqs(1, 3), DEEP, "not json", *seqs(4, 6)]
    async with scripted_upstream(lambda _: frames) as up:
        lease = lease_for(fleet, conn, up.url)
        runner = connection(lease, context(rec))
        assert await run_until(runner, lambda: rec.seqs(conn) == [1, 2, 3, 4, 5, 6], 10) is None
    assert [m.data for m in rec.calls if m.seq is None] == [DEEP, "not json"]
    assert runner.ctx.metrics.totals["MalformedFrames"] == 2
    assert runner.ctx.metrics.totals["Reconnects"] == 0 and runner.held.checkpoint == 6
    assert {m.epoch for m in rec.calls} == {lease.epoch} and lease.epoch >= 1


async def test_an_absurd_seq_is_refused_and_the_checkpoint_kept(fleet: Fleet,
                                                                unique_id: str) -> None:
    """{"seq": 2**63-1} is not handled and does not become the checkpoint; 4.. still flow."""
    conn, rec = f"{unique_id}-jump", Recorder()
    frames = [*seqs(1, 3), json.dumps({"seq": 2**63 - 1}), *seqs(4, 6)]
    async with scripted_upstream(lambda _: frames) as up:
        runner = connection(lease_for(fleet, conn, up.url), context(rec))
        runner.held._cursor._max_jump = 1000  # what the supervisor passes from the config
        assert await run_until(runner, lambda: rec.seqs(conn) == [1, 2, 3, 4, 5, 6], 10) is None
    assert runner.held.checkpoint == 6 and runner.ctx.metrics.totals["FramesSkipped"] == 1


async def test_a_frame_that_keeps_killing_the_connection_is_skipped(fleet: Fleet,
                                                                    unique_id: str) -> None:
    """Seq 5 over max_size kills 3 connections in a row: it is skipped, noted on the item."""
    conn, rec = f"{unique_id}-poison", Recorder()
    huge = json.dumps({"seq": 5, "pad": "x" * 100_000})

    def frames(from_seq: int | None) -> list[str]:
        start = from_seq or 1
        return [huge if n == 5 else f for n, f in zip(range(start, 11), seqs(start, 10),
                                                       strict=True)]

    store = LeaseStore(fleet.ddb, fleet.table, lease_ms=3000, skew_ms=300)

    async def record(c: Connection, seq: int, error: str) -> None:
        await asyncio.to_thread(store.record_poison, c.held.lease, seq, error)

    async with scripted_upstream(frames) as up:
        ctx = context(rec, options=ConnectOptions(max_size=64 * 1024),
                      backoff=Backoff(0.01, 0.05, 6), record_poison=record)
        runner = connection(lease_for(fleet, conn, up.url), ctx)
        assert await run_until(runner, lambda: rec.seqs(conn)[-1:] == [10], 10) is None
    assert rec.seqs(conn) == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert up.from_seqs == [None, 5, 5, 6]  # killed by seq 5 three times, then past it
    assert runner.ctx.metrics.totals["FramesSkipped"] == 1
    await async_wait_until(lambda: item_attr(fleet.item(conn), "poison_seq") == 5, 5, "noted")
    assert "1009" in item_attr(fleet.item(conn), "last_error")
