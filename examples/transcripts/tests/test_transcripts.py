"""The transcripts example on the local fleet: no segment lost, none written twice."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, HANDLER, ddb_client
from transcripts import handler
from transcripts.handler import text_of
from transcripts.store import TABLE_ENV, SegmentStore

from holdfast import Message, StaleEpoch
from holdfast.testing import LocalFleet

# Lease epochs are clock-derived and only go up per conn_id: large numbers, never 1, 2, 3.
OLD, NEW = 1_812_345_678_901, 1_812_345_682_901


def _store(fleet: LocalFleet) -> SegmentStore:
    return SegmentStore(ddb_client(fleet.env), fleet.env[TABLE_ENV])


class PausedClient:
    """A DynamoDB client whose writes wait for ``resume``: a holder stopped (a GC pause, a
    frozen VM) after deciding a write and before DynamoDB receives it."""

    def __init__(self, client: Any) -> None:
        self.client, self.reached, self.resume = client, threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.client, name)
        if name not in ("put_item", "transact_write_items"):
            return call

        def paused(**kwargs: Any) -> Any:
            self.reached.set()
            assert self.resume.wait(30), "never resumed"
            return call(**kwargs)
        return paused


def test_a_replay_is_refused_and_the_first_write_kept(holdfast_fleet: LocalFleet) -> None:
    """Writing the same conn_id#seq twice stores it once, as the first writer wrote it."""
    store = _store(holdfast_fleet)
    conn = holdfast_fleet.new_id("unit")
    assert store.put(conn, 7, "hello", "w1", OLD) is True
    assert store.put(conn, 7, "hello again", "w1", OLD) is False
    assert store.put(conn, 7, "replayed by the successor", "w2", NEW) is False
    (item,) = store.segments(conn).values()
    assert item["pk"]["S"] == f"{conn}#7" and item["worker_id"]["S"] == "w1"


async def test_a_paused_holders_late_segment_is_refused(holdfast_fleet: LocalFleet) -> None:
    """Holder A, paused before writing seq 2, is refused once B took over and wrote 2 and 3."""
    store = _store(holdfast_fleet)
    conn = holdfast_fleet.new_id("pause")
    assert store.put(conn, 1, "one", "A", OLD)
    paused = PausedClient(store.client)
    late = asyncio.create_task(asyncio.to_thread(
        SegmentStore(paused, store.table).put, conn, 2, "two, from A", "A", OLD))
    assert await asyncio.to_thread(paused.reached.wait, 30)
    # A is stopped with its write in hand; B acquires the stream (a higher epoch) and writes.
    assert store.put(conn, 2, "two", "B", NEW) and store.put(conn, 3, "three", "B", NEW)
    paused.resume.set()
    with pytest.raises(StaleEpoch) as refused:
        await late
    assert (refused.value.epoch, refused.value.seen) == (OLD, NEW)
    stored = {s: (i["worker_id"]["S"], int(i["epoch"]["N"]))
              for s, i in store.segments(conn).items()}
    assert stored == {1: ("A", OLD), 2: ("B", NEW), 3: ("B", NEW)}  # B's segments stand


async def test_the_handler_drops_a_late_segment(holdfast_fleet: LocalFleet,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """handle() stores a segment; one at a lower epoch than written is logged, not stored."""
    for key, value in holdfast_fleet.env.items():  # what a worker's environment holds
        monkeypatch.setenv(key, value)  # the segment table's name (setup's) among them
    conn = holdfast_fleet.new_id("late")
    handler._store.cache_clear()
    try:
        await handler.handle(Message(conn, 1, '{"seq": 1, "data": "one"}', "B", NEW))
        await handler.handle(Message(conn, 2, '{"seq": 2, "data": "x"}', "A", OLD))  # no raise
    finally:
        handler._store.cache_clear()
    assert {s: i["text"]["S"] for s, i in _store(holdfast_fleet).segments(conn).items()} == {
        1: "one"}


def test_text_of_frames() -> None:
    """The text is the frame's data field; anything else is kept as it came."""
    assert text_of('{"seq": 1, "data": "hi"}') == "hi"
    assert text_of(b"plain") == "plain" and text_of("[1]") == "[1]"


def _checkpoint(fleet: LocalFleet, conn_id: str) -> int:
    item = fleet.item(conn_id)
    return -1 if item is None or item.last_seq is None else item.last_seq


def test_sigkill_failover_loses_and_duplicates_nothing(holdfast_fleet: LocalFleet) -> None:
    """Across a SIGKILL failover every seq is stored exactly once, by its first handler."""
    conns = [holdfast_fleet.start_stream() for _ in range(2)]
    for c in conns:
        holdfast_fleet.wait_owned(c)
    holdfast_fleet.wait_handled(conns[0], 20)
    # Killed while its handler is ahead of the stored checkpoint, so the crash must replay
    # (killed on a checkpoint's tick, nothing was: 2 runs in 19); the owner read just before
    # (the balancer may have moved the stream since it was first claimed).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
            max(h.seq for h in holdfast_fleet.handled(conns[0]))
            - _checkpoint(holdfast_fleet, conns[0]) < 5):
        time.sleep(0.02)
    owners = {c: holdfast_fleet.owner(c) for c in conns}
    victim = owners[conns[0]]
    assert victim is not None
    holdfast_fleet.kill_worker(victim, hard=True)
    for c in conns:
        if owners[c] == victim:
            holdfast_fleet.wait_owned(c, not_by=victim)
        # New seqs, not replays: the replay window alone can be longer than 10 messages.
        holdfast_fleet.wait_new_seqs(c, 10)
        holdfast_fleet.stop_stream(c)  # released: everything it handled is final
    store = _store(holdfast_fleet)
    # The sink itself, not only the deliveries: every checkpointed seq is a stored segment.
    checks = holdfast_fleet.assert_no_loss(conns, lambda c: store.segments(c).keys())
    assert checks[conns[0]].duplicates > 0, "no replay after the kill: nothing was tested"
    for c in conns:
        handled = holdfast_fleet.handled(c)
        stored = store.segments(c)
        assert set(stored) == {h.seq for h in handled}, f"{c}: stored != handled"
        first: dict[int, str] = {}
        for h in sorted(handled, key=lambda h: h.wall_ms):  # files are per worker: by time
            first.setdefault(h.seq, h.worker_id)
        replays = [s for s, n in Counter(h.seq for h in handled).items() if n > 1]
        # A replayed seq was refused: the item is still the first handler's write.
        assert all(stored[s]["worker_id"]["S"] == first[s] for s in replays)
        # Each item carries the epoch of the lease it was written under; the failover shows
        # as a later epoch on the segments after it.
        epochs = [int(stored[s]["epoch"]["N"]) for s in sorted(stored)]
        assert min(epochs) >= 1 and epochs == sorted(epochs)
        assert c != conns[0] or len(set(epochs)) >= 2  # the killed worker's stream moved on
        assert checks[c].duplicates == len(handled) - len(stored)


def test_dockerfile_and_cdk_context_name_this_handler() -> None:
    """The image, the CDK context and these tests run the same handler."""
    dockerfile = (EXAMPLE / "Dockerfile").read_text()
    assert re.search(rf"HOLDFAST_HANDLER={re.escape(HANDLER)}\b", dockerfile)
    assert f'"handler": "{HANDLER}"' in (EXAMPLE / "cdk.json").read_text()
    assert Path(EXAMPLE / "transcripts" / "handler.py").is_file()
