"""The transcripts example on the local fleet: no segment lost, none written twice."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from conftest import EXAMPLE, HANDLER, ddb_client
from transcripts.handler import text_of
from transcripts.store import TABLE_ENV, SegmentStore

from holdfast.testing import LocalFleet


def _store(fleet: LocalFleet) -> SegmentStore:
    return SegmentStore(ddb_client(fleet.env), fleet.fleet.worker_env[TABLE_ENV])


def test_a_replay_is_refused_and_the_first_write_kept(holdfast_fleet: LocalFleet) -> None:
    """Writing the same conn_id#seq twice stores it once, as the first writer wrote it."""
    store = _store(holdfast_fleet)
    conn = holdfast_fleet.new_id("unit")
    assert store.put(conn, 7, "hello", "w1") is True
    assert store.put(conn, 7, "hello again", "w2") is False
    (item,) = store.segments(conn).values()
    assert item["pk"]["S"] == f"{conn}#7" and item["worker_id"]["S"] == "w1"


def test_text_of_frames() -> None:
    """The text is the frame's data field; anything else is kept as it came."""
    assert text_of('{"seq": 1, "data": "hi"}') == "hi"
    assert text_of(b"plain") == "plain" and text_of("[1]") == "[1]"


def test_sigkill_failover_loses_and_duplicates_nothing(holdfast_fleet: LocalFleet) -> None:
    """Across a SIGKILL failover every seq is stored exactly once, by its first handler."""
    conns = [holdfast_fleet.start_stream() for _ in range(2)]
    owners = {c: holdfast_fleet.wait_owned(c) for c in conns}
    victim = owners[conns[0]]
    holdfast_fleet.wait_handled(conns[0], 20)
    holdfast_fleet.kill_worker(victim, hard=True)
    for c in conns:
        if owners[c] == victim:
            holdfast_fleet.wait_owned(c, not_by=victim)
        # New seqs, not replays: the replay window alone can be longer than 10 messages.
        holdfast_fleet.wait_new_seqs(c, 10)
        holdfast_fleet.stop_stream(c)  # released: everything it handled is final
    checks = holdfast_fleet.assert_no_loss(conns)
    assert checks[conns[0]].duplicates > 0, "no replay after the kill: nothing was tested"
    store = _store(holdfast_fleet)
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
