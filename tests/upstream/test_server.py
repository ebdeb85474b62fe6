"""The demo upstream: deterministic resumable streams, misbehaving paths, the connection log."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from holdfast.upstream import UpstreamServer, head_seq, message_for


def test_feed_is_deterministic() -> None:
    """Seq n of a stream is always the same message; the head advances with time and rate."""
    assert message_for("a", 5, 1000, 10) == message_for("a", 5, 1000, 10)
    assert message_for("a", 5, 1000, 10) != message_for("b", 5, 1000, 10)
    assert message_for("a", 5, 1000, 10)["ts"] == 1500
    assert [head_seq(t, 10) for t in (0, 0.05, 0.1, 1.0)] == [0, 0, 1, 10]


async def frames(url: str, n: int) -> list[dict[str, object]]:
    async with connect(url, compression=None) as ws:
        return [json.loads(await ws.recv()) for _ in range(n)]


async def test_live_then_replay_identical() -> None:
    """A client without from_seq starts live; from_seq=0 replays identical history then goes on."""
    async with UpstreamServer(rate=50) as server:
        first = await frames(server.url("x"), 10)
        seqs = [f["seq"] for f in first]
        assert seqs == list(range(seqs[0], seqs[0] + 10))
        # Replayed at least up to the live frames: compared where they overlap, and they
        # must (30 frames compared none once a slow start went live past seq 29).
        replay = await frames(server.url("x") + "?from_seq=0", max(30, seqs[-1] + 1))
        assert [f["seq"] for f in replay] == list(range(len(replay)))
        by_seq = {f["seq"]: f for f in replay}
        shared = [f for f in first if f["seq"] in by_seq]
        assert len(shared) == 10 and all(by_seq[f["seq"]] == f for f in shared)


async def test_paths_share_one_timeline_and_junk_is_interleaved() -> None:
    """/garbage sends the same good frames as /s, each followed by junk."""
    async with UpstreamServer(rate=100) as server:
        good = await frames(server.url("y") + "?from_seq=0", 5)
        async with connect(server.url("y", "garbage") + "?from_seq=0", compression=None) as ws:
            raw = [await ws.recv() for _ in range(10)]
        assert [json.loads(r) for r in raw[::2]] == good
        assert any(isinstance(r, bytes) for r in raw[1::2]) or all(
            not str(r).startswith('{"seq":') for r in raw[1::2])


async def test_misbehaving_paths() -> None:
    """/drop closes with 1011 after `every` frames, /reject and unknown paths refuse."""
    async with UpstreamServer(rate=200) as server:
        async with connect(server.url("z", "drop") + "?every=3", compression=None) as ws:
            for _ in range(3):
                await ws.recv()
            with pytest.raises(ConnectionClosedError) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        for url, status in ((server.url("z", "reject"), 503), (server.url("z", "nope"), 404)):
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url):
                    pass
            assert refused.value.response.status_code == status
        async with connect(server.url("h", "huge") + "?size=70000", compression=None,
                           max_size=2**20) as ws:
            sizes = [len(await ws.recv()) for _ in range(4)]
        assert max(sizes) == 70000


async def test_connlog_detects_overlaps(tmp_path: Path) -> None:
    """Concurrent connections to one stream are reported; sequential ones are not."""
    log_file = tmp_path / "conns.jsonl"
    async with UpstreamServer(rate=100, conn_log=log_file) as server:
        await frames(server.url("a"), 2)
        await frames(server.url("a"), 2)
        assert server.connlog.overlaps() == []
        async with (connect(server.url("b"), additional_headers={"X-Holdfast-Worker": "w1"}),
                    connect(server.url("b")) as ws2):
            await ws2.recv()
            found = server.connlog.overlaps()
        assert len(found) == 1 and found[0].stream_id == "b" and found[0].first.worker == "w1"
        await asyncio.sleep(0.1)
        assert server.connlog.open_count() == 0
    events = [json.loads(x) for x in log_file.read_text().splitlines()]
    assert [e["event"] for e in events].count("open") == 4
    assert all(e["closed_ns"] for e in events if e["event"] == "close")


def test_cli_prints_its_port() -> None:
    """The upstream command with --port 0 serves and prints the URL it listens on."""
    # `python -m holdfast.upstream` runs the same command as `holdfast upstream`, without
    # importing every other subcommand of the operator CLI.
    proc = subprocess.Popen([sys.executable, "-m", "holdfast.upstream", "--port", "0",
                             "--rate", "5"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("upstream listening on ws://127.0.0.1:")
        port = int(line.split(":")[2].split(" ")[0])
        got = asyncio.run(frames(f"ws://127.0.0.1:{port}/s/cli?from_seq=0", 2))
        assert [f["seq"] for f in got] == [0, 1]
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
