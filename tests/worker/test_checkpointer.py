"""The checkpoint writer's reactions to lost streams, on DynamoDB Local with real leases."""

from __future__ import annotations

import asyncio

from holdfast.core.rules import LeaseTiming
from holdfast.core.schema import BACKSTOP_MS
from holdfast.core.store import LeaseStore
from holdfast.worker.checkpointer import Checkpointer
from holdfast.worker.connection import Connection, ConnectionContext
from holdfast.worker.held import NO_FENCE_MS, HeldState, HeldStream
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


async def test_foreign_checkpoint_is_a_loss(fleet: Fleet, unique_id: str) -> None:
    """A stored checkpoint ahead of anything we handled means someone else wrote it: stop."""
    conn = f"{unique_id}-b"
    writer, runner = runner_for(fleet, conn, 7)
    fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                          UpdateExpression="SET last_seq = :s",
                          ExpressionAttributeValues={":s": {"N": "1000"}})
    # The real path: the checkpoint write fails, the store classifies it, on_lost acts.
    await writer.write()
    assert runner.held.state is HeldState.LOST and runner.held.stop_reason == "lost:regression"
    assert writer.metrics.totals["LeasesLost"] == 1
    assert item_attr(fleet.item(conn), "last_seq") == 1000  # nothing written over it


async def test_checkpoint_moved_ahead_by_an_operator_stops_the_stream(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """An edit that moves last_seq past the holder's checkpoint makes the holder stop."""
    conn, rec = f"{unique_id}-op", Recorder()
    fleet.create(conn, upstream.url(conn))
    async with running_worker(fleet, rec) as run:
        fleet.nudge(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 10, "messages")
        fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                              UpdateExpression="SET last_seq = :s",
                              ExpressionAttributeValues={":s": {"N": "1000000"}})
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "stream stopped")
        await asyncio.sleep(0)
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

    async def counting(held: list[Connection], *args: object) -> None:
        calls.append(len(held))
        await real(held, *args)  # type: ignore[arg-type]

    writer._renew = counting  # type: ignore[method-assign]
    await asyncio.gather(*(writer.anchor(c, 5 + i) for i, c in enumerate(conns.values())))
    assert calls == [40]
    for i, conn in enumerate(conns):
        assert item_attr(fleet.item(conn), "last_seq") == 5 + i
        assert conns[conn].held.lease.last_seq == 5 + i
