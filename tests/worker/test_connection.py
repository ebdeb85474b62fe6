"""One held stream's connection task against the real demo upstream (drops, junk, huge frames)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from holdfast.core.model import Lease
from holdfast.core.store import LeaseStore
from holdfast.core.urls import UrlPolicy
from holdfast.upstream import UpstreamServer
from holdfast.upstream.feed import frame_for
from holdfast.worker import connection as connection_module
from holdfast.worker.backoff import Backoff
from holdfast.worker.connection import Connection
from holdfast.worker.context import ConnectionContext
from holdfast.worker.dial import ConnectOptions, close_reading
from holdfast.worker.held import NO_FENCE_MS, HeldStream
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.prefetch import Prefetch
from holdfast.worker.protocol import Parsed, QueryParamProtocol
from tests.worker.conftest import (
    LOOPBACK_POLICY,
    Fleet,
    UpstreamThread,
    async_wait_until,
    missing_seqs,
)
from tests.worker.helpers import Recorder


def lease_for(fleet: Fleet, conn: str, url: str) -> Lease:
    fleet.create(conn, url)
    return LeaseStore(fleet.ddb, fleet.table, lease_ms=3000, skew_ms=300).acquire(conn, "me")


def context(rec: Recorder, **kw: object) -> ConnectionContext:
    kw.setdefault("policy", LOOPBACK_POLICY)  # the demo upstream listens on 127.0.0.1
    kw.setdefault("backoff", Backoff(0.01, 0.05, 3))
    kw.setdefault("protocol", QueryParamProtocol())
    return ConnectionContext(worker_id="me", handler=rec, metrics=WorkerMetrics(),
                             **kw)  # type: ignore[arg-type]


def connection(lease: Lease, ctx: ConnectionContext) -> Connection:
    return Connection(HeldStream(lease, fence_mono_ms=NO_FENCE_MS), ctx)


async def run_until(runner: Connection, done: object, within_s: float) -> str | None:
    runner.task = asyncio.create_task(runner.run())
    try:
        await async_wait_until(done, within_s, "stream progress")  # type: ignore[arg-type]
    finally:
        runner.drain("test over")
    return await asyncio.wait_for(runner.task, 5)


async def test_resumes_after_drops_without_gap(fleet: Fleet, upstream: UpstreamThread,
                                               unique_id: str) -> None:
    """An upstream that drops every 5 frames is resumed with from_seq: no gap, no duplicate."""
    conn, rec = f"{unique_id}-drop", Recorder()
    runner = connection(lease_for(fleet, conn, upstream.url(conn, "drop")), context(rec))
    assert await run_until(runner, lambda: len(rec.seqs(conn)) >= 23, 15) is None
    seqs = rec.seqs(conn)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    records = upstream.server.connlog.records(conn)
    assert len(records) >= 4
    for before, after in itertools.pairwise(records):
        assert after.from_seq == before.last_seq + 1  # resumed right after the last handled
    assert runner.ctx.metrics.totals["Reconnects"] >= 4
    assert runner.held.checkpoint == seqs[-1]


async def test_resumes_from_the_stored_checkpoint(fleet: Fleet, upstream: UpstreamThread,
                                                  unique_id: str) -> None:
    """A lease acquired with last_seq N connects with from_seq=N+1 and gets N+1 first."""
    conn, rec = f"{unique_id}-ck", Recorder()
    upstream.server.start_of(conn)
    await asyncio.sleep(0.5)  # the stream has ~10 messages by now
    fleet.create(conn, upstream.url(conn))
    fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                          UpdateExpression="SET last_seq = :s",
                          ExpressionAttributeValues={":s": {"N": "3"}})
    lease = LeaseStore(fleet.ddb, fleet.table, lease_ms=3000, skew_ms=300).acquire(conn, "me")
    runner = connection(lease, context(rec))
    await run_until(runner, lambda: len(rec.seqs(conn)) >= 12, 10)
    assert rec.seqs(conn)[:3] == [4, 5, 6]


async def test_junk_frames_pass_with_no_seq(fleet: Fleet, upstream: UpstreamThread,
                                            unique_id: str) -> None:
    """Frames without an integer seq reach the handler with seq None and move no checkpoint."""
    conn, rec = f"{unique_id}-junk", Recorder()
    runner = connection(lease_for(fleet, conn, upstream.url(conn, "garbage")), context(rec))
    await run_until(runner, lambda: len(rec.calls) >= 30, 10)
    junk = [m for m in rec.calls if m.seq is None]
    assert junk and any(isinstance(m.data, bytes) for m in junk)
    assert not missing_seqs(rec.seqs(conn)) and runner.held.checkpoint == max(rec.seqs(conn))
    assert runner.ctx.metrics.totals["Reconnects"] == 0


class _NegatingProtocol(QueryParamProtocol):
    """A plug-in with a bug: every seq it reads comes back negative."""

    def parse(self, frame: str | bytes) -> Parsed:
        parsed = super().parse(frame)
        return Parsed(None if parsed.seq is None else -1 - parsed.seq, parsed.data)


async def test_a_protocol_plug_ins_impossible_seq_is_never_a_checkpoint(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A plugged-in protocol returning seq -3 (or True): handed on seq-less and counted
    malformed, as the built-in parser treats one, not admitted as a sequence number."""
    conn, rec = f"{unique_id}-neg", Recorder()
    runner = connection(lease_for(fleet, conn, upstream.url(conn)),
                        context(rec, protocol=_NegatingProtocol()))
    await run_until(runner, lambda: len(rec.calls) >= 5, 10)
    assert all(m.seq is None for m in rec.calls)
    assert runner.ctx.metrics.totals["MalformedFrames"] >= 5 and runner.held.checkpoint is None


async def test_oversized_frames_are_refused_and_isolated(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A frame over max_size drops that connection only; the stream resumes without a gap."""
    big, ok = f"{unique_id}-big", f"{unique_id}-ok"
    rec = Recorder()
    ctx = context(rec, options=ConnectOptions(max_size=64 * 1024))
    r1 = connection(lease_for(fleet, big, upstream.url(big, "huge") + "?size=200000"), ctx)
    r2 = connection(lease_for(fleet, ok, upstream.url(ok)), ctx)
    r2.task = asyncio.create_task(r2.run())
    await run_until(r1, lambda: len(rec.seqs(big)) >= 10, 10)
    r2.drain("test over")
    await r2.task
    assert ctx.metrics.totals["Reconnects"] >= 2
    assert not missing_seqs(rec.seqs(big)) and not missing_seqs(rec.seqs(ok))
    assert all(len(m.data) < 64 * 1024 for m in rec.calls)


async def test_an_upstream_that_says_hello_and_closes_is_given_up(fleet: Fleet,
                                                                  unique_id: str) -> None:
    """A frame without a seq is not progress: an upstream that sends one (a hello, an error
    text) and closes, every time, is given up after the back-off's failures, not reconnected
    for ever at the base delay."""
    connects = 0

    async def hello_and_close(ws: ServerConnection) -> None:
        nonlocal connects
        connects += 1
        await ws.send('{"type": "hello"}')
        await ws.close()

    rec = Recorder()
    async with serve(hello_and_close, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/feed"
        runner = connection(lease_for(fleet, f"{unique_id}-hello", url), context(rec))
        error = await asyncio.wait_for(runner.run(), 10)
    assert error is not None and "3 connection failures" in error
    assert connects == 3 and len(rec.calls) == 3


async def test_an_upstream_that_delivers_one_message_a_connection_is_slowed_not_given_up(
        fleet: Fleet, unique_id: str) -> None:
    """An upstream that sends one new seq and closes, every connection, is never given up (it
    delivers) but is reconnected ever later, up to the bound for short connections (4 s at
    the 0.5 s base), not at the base delay for ever: thousands of such streams were a storm."""
    delays: list[float] = []

    async def one_and_close(ws: ServerConnection) -> None:
        await ws.send(frame_for("one", len(delays), 0, 10.0))  # the seq after the last handled
        await ws.close()

    async def recorded(seconds: float) -> None:
        delays.append(seconds)  # asked for, not waited

    conn, rec = f"{unique_id}-one", Recorder()
    async with serve(one_and_close, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/feed"
        ctx = context(rec, backoff=Backoff(0.5, 30.0, 3), sleep=recorded)
        runner = connection(lease_for(fleet, conn, url), ctx)
        assert await run_until(runner, lambda: len(delays) >= 8, 10) is None  # not given up
    ceilings = [0.5, 1, 2, 4, 4, 4, 4, 4]
    assert all(c / 2 <= d <= c for c, d in zip(ceilings, delays[:8], strict=True)), delays
    assert rec.seqs(conn) == list(range(len(rec.seqs(conn)))) and len(rec.seqs(conn)) >= 8


async def test_a_handshake_that_never_completes_is_given_up(
        fleet: Fleet, unique_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An upstream that accepts the TCP connection but never answers the handshake (or a host
    that drops SYNs) fails at the open timeout every time: given up after the back-off's
    failures. The attempt's time counted as a connection that held (the open timeout equals
    STABLE_CONNECTION_MS by default), so it was retried for ever, never shown as failing."""
    monkeypatch.setattr(connection_module, "STABLE_CONNECTION_MS", 100)
    accepted: list[asyncio.StreamWriter] = []

    async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # reads nothing, answers nothing

    server = await asyncio.start_server(never_answers, "127.0.0.1", 0)
    try:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/feed"
        ctx = context(Recorder(), options=ConnectOptions(open_timeout_s=0.3))
        runner = connection(lease_for(fleet, f"{unique_id}-hang", url), ctx)
        error = await asyncio.wait_for(runner.run(), 10)
    finally:
        for writer in accepted:
            writer.close()
        server.close()
    assert error is not None and error.startswith("3 connection failures"), error
    assert "opening handshake" in error and len(accepted) == 3


async def test_a_warm_sockets_buffer_is_let_go_once_delivered(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stream started on a warm socket delivers the warm-up's buffer, then drops it: the
    frames are not kept for the connection's life."""
    conn, rec = f"{unique_id}-warm", Recorder()
    lease = lease_for(fleet, conn, upstream.url(conn))
    ctx = context(rec)
    prefetch = Prefetch.for_stream(conn, lease.ws_url, None, ctx)
    await prefetch.open(5)
    await async_wait_until(lambda: len(prefetch.frames) >= 3, 5, "frames buffered")
    taken = await prefetch.take()
    buffered = len(taken.frames)
    runner = connection(lease, ctx)
    runner.prefetched = taken
    await run_until(runner, lambda: len(rec.calls) >= buffered + 3, 10)
    assert taken.frames == [] and not missing_seqs(rec.seqs(conn))


async def test_host_resolving_to_metadata_is_refused(fleet: Fleet, unique_id: str) -> None:
    """A host name that resolves to 169.254.169.254 is never connected to: give-up at once."""
    async def evil_dns(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "169.254.169.254"]

    conn, rec = f"{unique_id}-dns", Recorder()
    ctx = context(rec, resolve=evil_dns, policy=UrlPolicy())
    runner = connection(lease_for(fleet, conn, "ws://innocent.example/s/1?token=secret"), ctx)
    error = await asyncio.wait_for(runner.run(), 5)
    assert error is not None and "metadata" in error and "secret" not in error
    assert runner.ctx.metrics.totals["Reconnects"] == 0


async def test_loopback_is_refused_without_an_explicit_allow_list(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """With the default policy the loopback upstream is never connected to: give-up at once."""
    conn, rec = f"{unique_id}-lo", Recorder()
    runner = connection(lease_for(fleet, conn, upstream.url(conn) + "?token=secret"),
                        context(rec, policy=UrlPolicy()))
    error = await asyncio.wait_for(runner.run(), 5)
    assert error is not None and error.startswith("ws_url refused") and "loopback" in error
    assert "secret" not in error and not upstream.server.connlog.records(conn)


async def test_worker_id_header_is_opt_in_and_logs_hide_the_url(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """No X-Holdfast-Worker header unless enabled; the connect log shows no path or token."""
    rec = Recorder()
    for conn, options in ((f"{unique_id}-h0", ConnectOptions()),
                          (f"{unique_id}-h1", ConnectOptions(send_worker_id=True))):
        runner = connection(lease_for(fleet, conn, upstream.url(conn) + "?token=s3cr3t"),
                            context(rec, options=options))
        await run_until(runner, lambda c=conn: len(rec.seqs(c)) >= 2, 10)
    assert [r.worker for r in upstream.server.connlog.records(f"{unique_id}-h0")] == [None]
    assert [r.worker for r in upstream.server.connlog.records(f"{unique_id}-h1")] == ["me"]
    connected = [vars(r) for r in caplog.records if r.getMessage() == "connected"]
    assert len(connected) == 2 and all("token=***" in c["url"] for c in connected)
    assert f"/s/{unique_id}-h0" not in str(connected) and "s3cr3t" not in caplog.text + str(
        connected)


async def test_abort_stops_handler_calls_at_once(fleet: Fleet, upstream: UpstreamThread,
                                                 unique_id: str) -> None:
    """abort() cancels the handler call in flight and drops the connection."""
    conn, rec = f"{unique_id}-ab", Recorder(delay_s=1.0)
    runner = connection(lease_for(fleet, conn, upstream.url(conn)), context(rec))
    runner.task = asyncio.create_task(runner.run())
    await async_wait_until(lambda: runner.handling.in_call, 5, "handler call")
    runner.abort("fenced")
    assert await asyncio.wait_for(runner.task, 1) is None
    # Nothing handled: the checkpoint only marks where this holder started (first seq - 1).
    assert rec.calls == [] and runner.held.checkpoint == -1
    await async_wait_until(lambda: upstream.server.connlog.open_count() == 0, 2, "closed")


async def test_a_drained_connection_with_unread_frames_closes_without_the_close_timeout() -> None:
    """Closing while frames pile up unread reads them away, so the peer's Close is seen at once
    instead of after ``close_timeout`` (websockets pauses reading past ``max_queue``)."""
    async with UpstreamServer(rate=50.0) as up:

        async def close_after_idle(i: int) -> float:
            async with connect(up.url(f"idle-{i}"), max_queue=2, close_timeout=2.0) as ws:
                for _ in range(3):
                    await ws.recv()
                await asyncio.sleep(0.3)  # ~15 frames arrive unread: reading pauses
                t0 = time.monotonic()
                await close_reading(ws)
                return time.monotonic() - t0

        took = await asyncio.gather(*(close_after_idle(i) for i in range(5)))
    assert max(took) < 1.0, took  # the plain close() waits the whole 2 s here


async def test_a_replay_gives_the_loop_turns(fleet: Fleet, unique_id: str) -> None:
    """500 frames arriving in one read are delivered with turns for other tasks between them."""
    conn, count = f"{unique_id}-burst", 500

    async def burst(ws: ServerConnection) -> None:
        # Every frame written at once, with no await between them: the client's socket read
        # gets them together, as in a replay after a failover.
        for seq in range(1, count + 1):
            ws.protocol.send_text(frame_for(conn, seq, 0, 10.0).encode())
        for data in ws.protocol.data_to_send():
            ws.transport.write(data)
        await ws.wait_closed()

    ticks = [0]

    async def ticker() -> None:
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    seen: list[int] = []

    async def handler(message: object) -> None:
        seen.append(ticks[0])

    async with serve(burst, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        ctx = context(Recorder())
        ctx.handler = handler
        runner = connection(lease_for(fleet, conn, f"ws://127.0.0.1:{port}/{conn}"), ctx)
        tick = asyncio.create_task(ticker())
        try:
            assert await run_until(runner, lambda: len(seen) >= count, 10) is None
        finally:
            tick.cancel()
    # Without the turns the ticker ran only where the socket read ran dry: a handful of times.
    assert seen[-1] - seen[0] >= count // 20


@contextlib.asynccontextmanager
async def after_seq_0(fleet: Fleet, conn: str, feed: Callable[[ServerConnection], Awaitable[None]],
                      rec: Recorder) -> AsyncIterator[Connection]:
    """A connection to ``feed`` (a server on 127.0.0.1), running, once seq 0 was handled."""
    async with serve(feed, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        runner = connection(lease_for(fleet, conn, f"ws://127.0.0.1:{port}/x"), context(rec))
        runner.task = asyncio.create_task(runner.run())
        await async_wait_until(lambda: rec.seqs(conn) == [0], 5, "seq 0 handled")
        yield runner


async def test_drain_after_frame_stops_right_after_the_next_frame(fleet: Fleet,
                                                                  unique_id: str) -> None:
    """A warm handoff's drain waits for the next frame, hands it to the handler and stops
    there: the frame after it is left for the successor."""
    more = asyncio.Event()

    async def feed(ws: ServerConnection) -> None:
        await ws.send('{"seq": 0}')
        await more.wait()
        await ws.send('{"seq": 1}')
        await ws.send('{"seq": 2}')
        await ws.wait_closed()

    conn, rec = f"{unique_id}-between", Recorder()
    async with after_seq_0(fleet, conn, feed, rec) as runner:
        try:
            runner.drain_after_frame("handoff", 30)
            await asyncio.sleep(0.05)
            assert runner.task is not None and not runner.task.done()
            assert not runner.held.stopping  # waiting for a frame
        finally:
            more.set()  # the server's handler ends either way
        await asyncio.wait_for(runner.task, 5)
    assert rec.seqs(conn) == [0, 1] and runner.held.stop_reason == "handoff"


async def test_drain_after_frame_stops_after_a_frame_with_a_seq(fleet: Fleet,
                                                                 unique_id: str) -> None:
    """Frames without a seq before the next seq are handled and do not stop the drain there
    (the successor could not tell them from the ones after it): it stops after seq 1."""
    more = asyncio.Event()

    async def feed(ws: ServerConnection) -> None:
        await ws.send('{"seq": 0}')
        await more.wait()
        for frame in ('{"note": "a"}', b"\x00", '{"seq": 1}', '{"note": "b"}', '{"seq": 2}'):
            await ws.send(frame)
        await ws.wait_closed()

    conn, rec = f"{unique_id}-seqless", Recorder()
    async with after_seq_0(fleet, conn, feed, rec) as runner:
        runner.drain_after_frame("handoff", 30)
        more.set()
        assert runner.task is not None
        await asyncio.wait_for(runner.task, 5)
    assert [m.seq for m in rec.calls] == [0, None, None, 1]


async def test_drain_after_frame_stops_a_quiet_stream_in_time(fleet: Fleet,
                                                              unique_id: str) -> None:
    """No next frame within the wait: the stream drains anyway."""
    async def quiet(ws: ServerConnection) -> None:
        await ws.send('{"seq": 0}')
        await ws.wait_closed()

    conn, rec = f"{unique_id}-quiet", Recorder()
    async with after_seq_0(fleet, conn, quiet, rec) as runner:
        runner.drain_after_frame("handoff", 0.05)
        assert runner.task is not None
        await asyncio.wait_for(runner.task, 5)
    assert rec.seqs(conn) == [0] and runner.held.stop_reason == "handoff"


def test_a_fence_or_a_loss_is_counted_once_per_stream_whoever_finds_it() -> None:
    """``LeasesFenced`` and ``LeasesLost`` count streams, not findings: fenced twice (the fence
    watcher and a frame past the deadline), then found lost, is one fence and no loss; lost
    twice is one loss."""
    def runner(conn: str) -> tuple[Connection, ConnectionContext]:
        ctx = context(Recorder())
        lease = Lease(conn, "me", 1, 0, "ws://127.0.0.1:9/s/x", None)
        return Connection(HeldStream(lease, fence_mono_ms=NO_FENCE_MS), ctx), ctx

    fenced, ctx = runner("fenced")
    fenced.fence()
    fenced.fence()
    fenced.lose("lost")
    assert (ctx.metrics.totals["LeasesFenced"], ctx.metrics.totals["LeasesLost"]) == (1, 0)
    lost, ctx = runner("lost")
    lost.lose("lost")
    lost.lose("session")
    assert (ctx.metrics.totals["LeasesFenced"], ctx.metrics.totals["LeasesLost"]) == (0, 1)
