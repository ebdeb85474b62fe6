"""A new stream connected before its claim, its anchor written by the claim (``worker.prestart``).

In-process worker, DynamoDB Local, the demo upstream (or a quiet WebSocket server) on 127.0.0.1.
Whether the upstream was connected before or after the claim is read from the upstream's own
connection log against the lease's epoch (the acquire's wall clock); the checkpointer's anchor
writes are counted by wrapping the real method.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from holdfast.core.model import Lease, LeaseItem
from holdfast.core.nudge import REASON_INSERTED, Nudge
from holdfast.core.schema import ATTR
from holdfast.core.store import LeaseStore
from holdfast.worker.checkpointer import Checkpointer
from holdfast.worker.claims import SOURCE_INSERTED, Claim
from holdfast.worker.connection import Connection
from holdfast.worker.prestart import Prestart
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until
from tests.worker.helpers import Recorder, running_worker, set_attr


@pytest.fixture
def anchors(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Every anchor the checkpointer is asked to write, as (conn_id, checkpoint)."""
    asked: list[tuple[str, int]] = []
    real: Callable[[Checkpointer, Connection, int], Awaitable[bool]] = Checkpointer.anchor

    async def counting(self: Checkpointer, conn: Connection, seq: int) -> bool:
        asked.append((conn.held.lease.conn_id, seq))
        return await real(self, conn, seq)

    monkeypatch.setattr(Checkpointer, "anchor", counting)
    yield asked


def inserted(fleet: Fleet, conn_id: str, ws_url: str | None = None) -> None:
    """The router's nudge for a new item (with the item's URL, as the router sends it for a
    stream it saw fit to connect before its claim)."""
    fleet.nudge(conn_id, Nudge(conn_id, REASON_INSERTED, None, ws_url=ws_url).body())


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every item the worker reads with ``LeaseStore.get_raw``, by conn_id."""
    seen: list[str] = []
    real = LeaseStore.get_raw

    def counting(self: LeaseStore, conn_id: str) -> Any:
        seen.append(conn_id)
        return real(self, conn_id)

    monkeypatch.setattr(LeaseStore, "get_raw", counting)
    yield seen


async def test_new_stream_is_connected_before_its_claim_and_anchored_by_it(
        fleet: Fleet, upstream: UpstreamThread, anchors: list[tuple[str, int]]) -> None:
    """An inserted stream's upstream opens before the acquire, on one connection; the claim
    stores seq - 1 of the first frame, so no anchor write follows, and nothing is skipped."""
    rec = Recorder()
    async with running_worker(fleet, rec) as run:
        fleet.create("fresh", upstream.url("fresh"))
        inserted(fleet, "fresh")
        await async_wait_until(lambda: len(rec.seqs("fresh")) >= 5, 10, "5 messages handled")
        epoch = run.worker.streams["fresh"].held.lease.epoch
        conns = upstream.server.connlog.records("fresh")
        stored = fleet.item("fresh")
    assert len(conns) == 1 and conns[0].opened_wall_ms <= epoch
    first = conns[0].first_seq
    assert first is not None and rec.seqs("fresh")[:5] == list(range(first, first + 5))
    assert anchors == []
    assert int(stored[ATTR.last_seq]["N"]) >= first - 1


@pytest.mark.parametrize("by", ["item", "fleet default", "fleet default, URL in the nudge"])
async def test_stream_allowing_one_connection_is_claimed_before_it_connects(
        fleet: Fleet, upstream: UpstreamThread, anchors: list[tuple[str, int]],
        by: str) -> None:
    """A single-connection stream (its item says so, or the item is silent and
    HOLDFAST_SINGLE_CONNECTION does, even with the URL in the nudge) is never connected early
    (two nudged workers would both connect): claimed, then connected, then anchored as before."""
    rec = Recorder()
    env = {"HOLDFAST_SINGLE_CONNECTION": "1"} if by.startswith("fleet default") else {}
    async with running_worker(fleet, rec, **env) as run:
        fleet.create("single", upstream.url("single"))
        if by == "item":
            set_attr(fleet, "single", ATTR.single_connection, {"BOOL": True})
        inserted(fleet, "single", upstream.url("single") if "URL" in by else None)
        await async_wait_until(lambda: rec.seqs("single"), 10, "a message handled")
        epoch = run.worker.streams["single"].held.lease.epoch
        conns = upstream.server.connlog.records("single")
    assert len(conns) == 1 and conns[0].opened_wall_ms >= epoch
    assert [c for c, _ in anchors] == ["single"]


async def test_a_nudge_carrying_the_url_connects_first_without_reading_the_item(
        fleet: Fleet, upstream: UpstreamThread, anchors: list[tuple[str, int]],
        reads: list[str]) -> None:
    """With the URL in the inserted nudge the upstream opens before the acquire and the item is
    not read first (one strongly consistent read and its latency saved per new stream)."""
    rec = Recorder()
    async with running_worker(fleet, rec) as run:
        fleet.create("hinted", upstream.url("hinted"))
        inserted(fleet, "hinted", upstream.url("hinted"))
        await async_wait_until(lambda: len(rec.seqs("hinted")) >= 3, 10, "3 messages handled")
        epoch = run.worker.streams["hinted"].held.lease.epoch
        conns = upstream.server.connlog.records("hinted")
    assert len(conns) == 1 and conns[0].opened_wall_ms <= epoch
    assert "hinted" not in reads and anchors == []


async def test_a_stream_allowing_two_connections_connects_first_under_a_single_fleet_default(
        fleet: Fleet, upstream: UpstreamThread) -> None:
    """HOLDFAST_SINGLE_CONNECTION=1 but the item says single_connection false: the worker reads
    the item (the nudge cannot say) and connects before its claim."""
    rec = Recorder()
    async with running_worker(fleet, rec, HOLDFAST_SINGLE_CONNECTION="1") as run:
        fleet.create("two", upstream.url("two"))
        set_attr(fleet, "two", ATTR.single_connection, {"BOOL": False})
        inserted(fleet, "two", upstream.url("two"))
        await async_wait_until(lambda: rec.seqs("two"), 10, "a message handled")
        epoch = run.worker.streams["two"].held.lease.epoch
        conns = upstream.server.connlog.records("two")
    assert len(conns) == 1 and conns[0].opened_wall_ms <= epoch


async def test_a_nudges_stale_url_is_dropped_for_the_items(
        fleet: Fleet, upstream: UpstreamThread, reads: list[str]) -> None:
    """A nudge whose URL the item no longer has (changed since the insert, or forged) costs one
    early socket, closed once the acquired lease shows another URL; the stream runs on the
    item's, from its own first frame: the other upstream's seq is not written as its anchor."""
    rec = Recorder()
    # The other URL's feed is 100 s old (head ~2,000): its first frame would anchor the stream
    # far past its own feed's head, skipping (or waiting for) everything up to it.
    upstream.server._starts["old-url"] = (time.monotonic() - 100, time.time_ns() // 10**6)
    async with running_worker(fleet, rec) as run:
        fleet.create("moved-url", upstream.url("moved-url"))
        inserted(fleet, "moved-url", upstream.url("old-url"))
        await async_wait_until(lambda: len(rec.seqs("moved-url")) >= 3, 10, "3 handled")
        assert run.worker.streams["moved-url"].held.lease.ws_url == upstream.url("moved-url")
        assert min(rec.seqs("moved-url")) < 100, rec.seqs("moved-url")[:3]
        stale = upstream.server.connlog.records("old-url")
        await async_wait_until(lambda: all(c.closed_wall_ms for c in stale), 5, "closed")
    assert len(stale) == 1 and len(upstream.server.connlog.records("moved-url")) == 1
    assert "moved-url" not in reads


async def test_stream_with_a_checkpoint_is_claimed_first_and_resumes_after_it(
        fleet: Fleet, upstream: UpstreamThread, anchors: list[tuple[str, int]]) -> None:
    """An "inserted" nudge for an item that has a checkpoint: no early connect; the stream
    resumes right after its checkpoint."""
    rec = Recorder()
    async with running_worker(fleet, rec) as run:
        fleet.create("used", upstream.url("used"))
        set_attr(fleet, "used", ATTR.last_seq, {"N": "41"})
        inserted(fleet, "used")
        await async_wait_until(lambda: rec.seqs("used"), 10, "a message handled")
        epoch = run.worker.streams["used"].held.lease.epoch
        conns = upstream.server.connlog.records("used")
    assert len(conns) == 1 and conns[0].opened_wall_ms >= epoch
    assert conns[0].from_seq == 42 and rec.seqs("used")[0] == 42
    assert anchors == []


async def test_upstream_refusing_the_early_connect_is_claimed_all_the_same(
        fleet: Fleet, upstream: UpstreamThread) -> None:
    """An upstream that refuses the handshake costs the early connect only: the stream is
    claimed at once and its own connection's back-off takes over."""
    async with running_worker(fleet, Recorder()) as run:
        fleet.create("refuses", upstream.url("refuses", kind="reject"))
        inserted(fleet, "refuses")
        await async_wait_until(lambda: run.worker.counts["claimed"] >= 1, 10, "claimed")


async def test_quiet_upstream_is_claimed_without_its_first_frame(
        fleet: Fleet, anchors: list[tuple[str, int]]) -> None:
    """An upstream that says nothing on connect is claimed after a short wait, on the socket
    already open; its anchor is written when its first frame comes."""
    speak = asyncio.Event()
    opened: list[int] = []

    async def quiet(ws: ServerConnection) -> None:
        opened.append(1)
        await speak.wait()
        for seq in range(7, 10):
            await ws.send(json.dumps({"seq": seq}))
        await ws.wait_closed()

    rec = Recorder()
    async with serve(quiet, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with running_worker(fleet, rec) as run:
            fleet.create("quiet", f"ws://127.0.0.1:{port}/quiet")
            inserted(fleet, "quiet")
            await async_wait_until(lambda: "quiet" in run.worker.streams, 10, "claimed")
            assert anchors == [] and opened == [1]
            speak.set()
            await async_wait_until(lambda: rec.seqs("quiet") == [7, 8, 9], 10, "3 handled")
    assert anchors == [("quiet", 6)] and opened == [1]


async def test_a_second_nudge_while_the_claim_takes_its_socket_is_refused(
        fleet: Fleet, upstream: UpstreamThread, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim awaits its early socket after the acquire; another nudge for the stream seen
    then is a conflict (it is still being claimed), not a second acquire under a new epoch."""
    real = Prestart.taken_by
    taking = asyncio.Event()

    async def slow_taken_by(self: Prestart, lease: Lease) -> Any:
        taking.set()
        await asyncio.sleep(0.3)  # the window a second nudge fell into (measured under load)
        return await real(self, lease)

    monkeypatch.setattr(Prestart, "taken_by", slow_taken_by)
    rec = Recorder()
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        fleet.create("twice", upstream.url("twice"))
        first = asyncio.create_task(run.worker.holdings.claim("twice", SOURCE_INSERTED))
        await asyncio.wait_for(taking.wait(), 10)
        epoch = LeaseItem.from_ddb(fleet.item("twice")).epoch
        assert await run.worker.holdings.claim("twice") is Claim.CONFLICT
        assert await first is Claim.CLAIMED
        await async_wait_until(lambda: len(rec.seqs("twice")) >= 3, 10, "messages")
        assert LeaseItem.from_ddb(fleet.item("twice")).epoch == epoch
        assert run.worker.streams["twice"].held.lease.epoch == epoch
    assert len(upstream.server.connlog.records("twice")) == 1
