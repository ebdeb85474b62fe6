"""A successor whose TAKE does not come looks in the table: a transfer that landed is taken on
the warm socket, a holder that let go (died and was reaped) is an ordinary claim; neither
waits for the warm-up's ``TAKE_TIMEOUT_MS``."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from typing import Any

import pytest

from holdfast.core.batch_reads import read_raw_many
from holdfast.core.handoff import ABORT, TAKE, WARM, HandoffStep
from holdfast.core.model import Lease, LeaseItem, StoredItem
from holdfast.core.schema import ATTR, STOPPED
from holdfast.core.store import LeaseStore
from holdfast.core.table import set_desired_state
from holdfast.worker import warmups
from holdfast.worker.claims import Claim
from holdfast.worker.prefetch import Prefetch
from holdfast.worker.warmup import WarmUp
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until, missing_seqs
from tests.worker.helpers import Recorder, Running, running_worker, set_attr


async def _warm_for_holder(fleet: Fleet, upstream: UpstreamThread, run: Running,
                           conn: str, holder_id: str, *, single: bool | None = None,
                           kind: str = "s") -> tuple[LeaseStore, Lease]:
    """``conn`` held by a holder outside any worker (a session of its own); ``run``'s worker
    warmed up for it from seq 1 (``single``: the item's single_connection, and a reservation
    instead, no socket), READY sent long ago: its look for TAKE is due. ``kind``: the demo
    upstream's path."""
    fleet.create(conn, upstream.url(conn, kind))
    if single is not None:
        set_attr(fleet, conn, ATTR.single_connection, {"BOOL": single})
    holder = fleet.sessions().start(holder_id, 10).owner
    store = run.worker.store
    lease = store.acquire(conn, holder)
    prefetch = None
    if not single:
        prefetch = Prefetch.for_stream(conn, lease.ws_url, 1, run.worker.holdings.ctx)
        await prefetch.open()
    # The deadline far away: without the look, nothing would end this warm-up in the test.
    run.worker.handoffs.warm_ups.warming[conn] = WarmUp(
        prefetch, holder, lease.epoch, 2**62,
        StoredItem(LeaseItem.from_ddb(fleet.item(conn)), fleet.item(conn)),
        run.worker.owner or "")
    return store, lease


def _first_read_slow(store: LeaseStore, delay_s: float = 0.3) -> None:
    """``store``'s next item read answers ``delay_s`` late (the reads after it at once)."""
    read, calls = store.get_raw, itertools.count()

    def slow_first(conn_id: str) -> Any:
        if next(calls) == 0:
            time.sleep(delay_s)  # on the worker's I/O thread, not the loop
        return read(conn_id)

    store.get_raw = slow_first  # type: ignore[method-assign]


async def test_a_landed_transfer_without_its_take_is_taken_on_the_warm_socket(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The holder wrote the transfer but its TAKE never came: the successor finds itself
    named in the table and starts on its warm socket (one upstream connection), from seq 1."""
    rec, conn = Recorder(), f"{unique_id}-landed"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        assert run.worker.owner
        store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{unique_id}")
        store.transfer(lease, None, run.worker.owner)  # and the holder dies: no TAKE
        await async_wait_until(lambda: conn in run.worker.streams, 5, "taken without TAKE")
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 5, 5, "messages")
    seqs = rec.seqs(conn)
    assert seqs[0] == 1 and missing_seqs(seqs) == [] and len(seqs) == len(set(seqs))
    assert len(upstream.server.connlog.records(conn)) == 1  # the warm socket, no reconnect


async def test_late_takes_are_looked_for_in_one_read_for_all(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two warm-ups whose TAKE is late at the same moment: one batched read looks for both
    transfers (the look loop after READY, not a GetItem each), and both streams start."""
    rec, conns = Recorder(), [f"{unique_id}-late-{i}" for i in range(2)]
    reads: list[list[str]] = []

    def counted(store: LeaseStore, conn_ids: Any) -> Any:
        reads.append(sorted(conn_ids))
        return read_raw_many(store, conn_ids)

    monkeypatch.setattr(warmups, "read_raw_many", counted)
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        assert run.worker.owner
        warming = run.worker.handoffs.warm_ups.warming
        for conn in conns:
            store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{conn}")
            warming[conn].check_ms = 2**62  # not yet late
            store.transfer(lease, None, run.worker.owner)  # and the holder dies: no TAKE
        for conn in conns:
            warming[conn].check_ms = 0  # both late now, together
        await async_wait_until(lambda: all(c in run.worker.streams for c in conns), 5,
                               "taken without TAKE")
    assert reads[0] == sorted(conns)


async def test_a_holder_gone_before_its_transfer_is_claimed_not_waited_for(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The holder let the stream go without a transfer (it died and was reaped; here it
    releases): the successor drops its warm-up and claims the stream at once."""
    rec, conn = Recorder(), f"{unique_id}-reaped"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{unique_id}")
        assert store.release(lease) is None
        await async_wait_until(lambda: conn in run.worker.streams, 5, "claimed")
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 5, "messages")
        assert conn not in run.worker.handoffs.warm_ups.warming
    assert missing_seqs(rec.seqs(conn)) == []


async def test_a_take_racing_the_tables_look_starts_the_stream_once(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The look found the transfer (no ``at``: it reads the item back) while the real TAKE
    arrives: one take runs, the other is dropped; the stream starts once, at the transferred
    epoch (no second claim re-epoching it), on the warm socket, nothing twice."""
    rec, conn = Recorder(), f"{unique_id}-race"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        assert run.worker.owner
        store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{unique_id}")
        run.worker.handoffs.warm_ups.warming[conn].check_ms = 2**62  # the test plays the look
        passed = store.transfer(lease, None, run.worker.owner)
        looked = HandoffStep(TAKE, conn, passed.epoch, passed.last_seq, lease.owner)
        # The real TAKE finds no warm-up left (the look took it): it reads the item back.
        real = HandoffStep(TAKE, conn, passed.epoch, passed.last_seq, lease.owner)
        _first_read_slow(store)  # the look's read answers last, as on the loaded bench
        await asyncio.gather(run.worker.handoffs.warm_ups.take(looked),
                             run.worker.handoffs.warm_ups.take(real))
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 5, 5, "messages")
        assert run.worker.streams[conn].held.lease.epoch == passed.epoch
        assert LeaseItem.from_ddb(fleet.item(conn)).epoch == passed.epoch
    seqs = rec.seqs(conn)
    assert missing_seqs(seqs) == [] and len(seqs) == len(set(seqs))
    assert len(upstream.server.connlog.records(conn)) == 1


async def test_a_second_start_of_a_held_stream_is_refused(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The last line against two deliverers in one worker: starting a stream it holds
    already leaves the running connection alone (one upstream connection, nothing twice)."""
    rec, conn = Recorder(), f"{unique_id}-twice"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        fleet.create(conn, upstream.url(conn))
        await run.worker.holdings.claim(conn)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 2, 5, "messages")
        running = run.worker.streams[conn]
        run.worker.holdings.start_warm(running.held.lease, None)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 8, 5, "more messages")
        assert run.worker.streams[conn] is running
    seqs = rec.seqs(conn)
    assert len(seqs) == len(set(seqs))
    assert len(upstream.server.connlog.records(conn)) == 1


async def test_a_reserved_stream_connects_once_the_lease_is_passed_and_keeps_its_rule(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A reservation (the item allows one connection at a time) taken over: the successor's
    only connection opens after the transfer, resumes after its checkpoint, and the held lease
    keeps the item's single_connection, so the successor's own next move is a reservation."""
    rec, conn = Recorder(), f"{unique_id}-reserved"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        assert run.worker.owner
        store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{unique_id}",
                                              single=True)
        assert upstream.server.connlog.records(conn) == []
        store.transfer(lease, 4, run.worker.owner)
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 5, "messages")
        assert run.worker.streams[conn].held.lease.single_connection is True
    assert len(upstream.server.connlog.records(conn)) == 1
    assert rec.seqs(conn)[0] == 5



async def test_a_warm_up_aborted_after_its_holder_let_go_claims_the_stream(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The holder gave the handoff up and released the stream to nobody; its nudge came
    while we still warmed up (refused as coming to us, deleted), then its ABORT: the dropped
    warm-up's last look claims the stream (nothing else would nudge it before the sweep)."""
    rec, conn = Recorder(), f"{unique_id}-aborted"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{unique_id}")
        warm_ups = run.worker.handoffs.warm_ups
        warm_ups.warming[conn].check_ms = 2**62  # no look for a late TAKE: only the last one
        assert store.release(lease) is None
        assert await run.worker.holdings.claim(conn, "nudge") is Claim.CONFLICT
        warm_ups.abort(conn)
        await async_wait_until(lambda: conn in run.worker.streams, 5, "claimed")
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 5, "messages")
    assert missing_seqs(rec.seqs(conn)) == []


async def test_closing_every_warm_up_drops_every_socket_at_once(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A lost session's warm-ups: all their sockets are dropped before the first close
    handshake is awaited (one handshake after the other kept the last socket open 2 s past a
    paused worker's SIGCONT, beside the stream's new holder)."""
    conns = [f"{unique_id}-all-{i}" for i in range(3)]
    async with running_worker(fleet, Recorder()) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        warm_ups = run.worker.handoffs.warm_ups
        for conn in conns:
            await _warm_for_holder(fleet, upstream, run, conn, f"h-{conn}")
        sockets = [w.prefetch.ws for w in warm_ups.warming.values()
                   if w.prefetch is not None and w.prefetch.ws is not None]
        assert len(sockets) == 3
        closing = asyncio.create_task(warm_ups.close_all())
        await asyncio.sleep(0)  # close_all's first step, up to its first await
        assert all(ws.transport.is_closing() for ws in sockets)
        await closing
        assert not warm_ups.warming


async def test_a_fast_streams_warm_socket_skips_all_the_holder_handled_meanwhile(
        fleet: Fleet, unique_id: str) -> None:
    """The holder handled 250 seqs after the warm-up began at 1 (a fast feed): the successor
    starts at 251, not giving the stream up over its buffer's 1..250 (more than the resume
    overlap of 100: they went back, stalled, and the stream sat in BACKOFF)."""
    fast = UpstreamThread(rate=400)
    try:
        rec, conn = Recorder(), f"{unique_id}-fast"
        async with running_worker(fleet, rec) as run:
            await async_wait_until(lambda: run.worker.owner, 5, "a session")
            assert run.worker.owner
            store, lease = await _warm_for_holder(fleet, fast, run, conn, f"h-{unique_id}")
            prefetch = run.worker.handoffs.warm_ups.warming[conn].prefetch
            assert prefetch is not None
            await async_wait_until(lambda: len(prefetch.frames) >= 260, 5, "buffered")
            store.transfer(lease, 250, run.worker.owner)  # the holder handled 1..250
            await async_wait_until(lambda: len(rec.seqs(conn)) >= 10, 5, "delivering")
            assert run.worker.counts["gave_up"] == 0
        seqs = rec.seqs(conn)
        assert seqs[0] == 251 and missing_seqs(seqs) == [] and len(seqs) == len(set(seqs))
    finally:
        fast.stop()


async def test_a_warm_sockets_seqless_frames_the_holder_handled_are_skipped(
        fleet: Fleet, unique_id: str) -> None:
    """A feed with a frame without a seq after each message: of the successor's buffer, those
    among the seqs the holder handled (1..100) are skipped with them; the one after 100 and
    every later one are delivered, once each."""
    up = UpstreamThread(rate=200)
    try:
        rec, conn = Recorder(), f"{unique_id}-seqless"
        async with running_worker(fleet, rec) as run:
            await async_wait_until(lambda: run.worker.owner, 5, "a session")
            assert run.worker.owner
            store, lease = await _warm_for_holder(fleet, up, run, conn, f"h-{unique_id}",
                                                  kind="garbage")
            prefetch = run.worker.handoffs.warm_ups.warming[conn].prefetch
            assert prefetch is not None
            await async_wait_until(lambda: len(prefetch.frames) >= 2 * 110, 5, "buffered")
            store.transfer(lease, 100, run.worker.owner)  # the holder handled 1..100
            await async_wait_until(lambda: len(rec.seqs(conn)) >= 20, 5, "delivering")
        calls = [m.seq for m in rec.calls if m.conn_id == conn]
        first = calls.index(101)
        assert calls[:first] == [None]  # 100's own follower; 99 before it, from 1..99: 0
        assert calls[first:first + 6] == [101, None, 102, None, 103, None]
    finally:
        up.stop()


async def test_a_transfer_to_us_stopped_before_its_take_is_released_not_started(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The holder passed the stream to us and its operator stopped it before we took it: the
    look finds it ours but STOPPED, drops the warm-up and releases it (the claim of a
    stopped stream of ours), never delivering it."""
    rec, conn = Recorder(), f"{unique_id}-stopped-take"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        assert run.worker.owner
        store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{unique_id}")
        # Handled up to 0: no anchor write of ours would find it STOPPED before delivering.
        store.transfer(lease, 0, run.worker.owner)  # and the holder dies: no TAKE
        assert set_desired_state(fleet.ddb, fleet.table, conn, STOPPED)
        await async_wait_until(lambda: ATTR.lease_owner not in fleet.item(conn), 5, "released")
        assert conn not in run.worker.streams and not rec.calls


async def test_a_warm_up_whose_session_changed_while_it_read_is_refused(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """WARM read the item while our session was lost and replaced: ABORT, not READY (READY
    under the old owner had the holder pass the lease to a replaced incarnation)."""
    conn = f"{unique_id}-warm-lost"
    async with running_worker(fleet, Recorder()) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        fleet.create(conn, upstream.url(conn))
        holder = fleet.sessions().start(f"h-{unique_id}", 10).owner
        lease = run.worker.store.acquire(conn, holder)
        warm_ups, current = run.worker.handoffs.warm_ups, run.worker.owner
        sent: list[HandoffStep] = []
        warm_ups._send = lambda _peer, step: sent.append(step)  # type: ignore[method-assign]
        read = warm_ups.store.read

        def read_while_replaced(conn_id: str) -> Any:
            run.worker.owner = f"{current}-new"  # lost and started again meanwhile
            return read(conn_id)

        warm_ups.store.read = read_while_replaced  # type: ignore[method-assign]
        try:
            await warm_ups.warm_up(HandoffStep(WARM, conn, lease.epoch, 1, holder))
        finally:
            warm_ups.store.read = read  # type: ignore[method-assign]
            run.worker.owner = current
        assert [s.kind for s in sent] == [ABORT] and conn not in warm_ups.warming


async def test_a_take_starts_the_stream_on_the_lease_the_transfer_wrote(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A TAKE that says the holder's transfer: the stream starts without a read, on the
    lease the transfer wrote (owner, epoch, expiry, checkpoint, move time, weight) and as
    not unowned at all."""
    rec, conn = Recorder(), f"{unique_id}-take-lease"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        me = run.worker.owner
        assert me
        store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{unique_id}")
        set_attr(fleet, conn, ATTR.weight, {"N": "3"})
        lease = dataclasses.replace(lease, weight=3.0)
        run.worker.handoffs.warm_ups.warming[conn] = dataclasses.replace(
            run.worker.handoffs.warm_ups.warming[conn], stored=StoredItem(
                LeaseItem.from_ddb(fleet.item(conn)), fleet.item(conn)))
        passed = store.transfer(lease, 4, me)

        def no_read(*_: Any) -> Any:
            raise AssertionError("the take read the table")

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(store, "read", no_read)
            mp.setattr(store, "get_raw", no_read)
            await run.worker.handoffs.warm_ups.take(HandoffStep(
                TAKE, conn, passed.epoch, passed.last_seq, lease.owner, passed.moved_at_ms))
        started = run.worker.streams[conn].held.lease
        assert started == dataclasses.replace(passed, unowned_ms=0)
        item = store.get(conn)
        assert item is not None and (item.lease_owner, item.epoch, item.last_seq) == (
            me, started.epoch, 4)


async def test_a_take_for_a_warm_up_of_a_replaced_session_is_not_started(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A warm-up for our old owner, its TAKE read from the old queue after a new session
    began: not started on the warm socket under the new owner (the table names the old one,
    which the sweeper releases to others: two deliverers); the item is read and it is not
    ours."""
    rec, conn = Recorder(), f"{unique_id}-old-take"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        assert run.worker.owner
        store, lease = await _warm_for_holder(fleet, upstream, run, conn, f"h-{unique_id}")
        warm_ups = run.worker.handoffs.warm_ups
        old = f"{run.worker.owner}-old"
        warm_ups.warming[conn] = dataclasses.replace(warm_ups.warming[conn], owner=old,
                                                     check_ms=2**62)
        passed = store.transfer(lease, None, old)
        await warm_ups.take(HandoffStep(TAKE, conn, passed.epoch, passed.last_seq,
                                        lease.owner, passed.moved_at_ms))
        assert conn not in run.worker.streams and conn not in warm_ups.warming
    assert not rec.calls


async def test_a_forged_take_starts_no_second_deliverer(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A TAKE nobody's transfer wrote (an order-queue message is anyone's with send permission:
    epoch 2**63-1, seq -1) is not taken on trust: the table says the holder still holds it,
    so the warm socket is closed and nothing is delivered (it started a second deliverer, and
    its epoch would have fenced every later holder's sink writes)."""
    rec, conn = Recorder(), f"{unique_id}-forged"
    async with running_worker(fleet, rec) as run:
        await async_wait_until(lambda: run.worker.owner, 5, "a session")
        holder_id = f"h-{unique_id}"
        _, lease = await _warm_for_holder(fleet, upstream, run, conn, holder_id)
        await run.worker.handoffs.warm_ups.take(
            HandoffStep(TAKE, conn, 2**63 - 1, -1, lease.owner, at=1))
        await asyncio.sleep(0.5)
        assert conn not in run.worker.streams and not rec.seqs(conn)
        assert conn not in run.worker.handoffs.warm_ups.warming
    assert LeaseItem.from_ddb(fleet.item(conn)).lease_owner == lease.owner
