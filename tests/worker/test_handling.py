"""A frame's way to the handler (``worker.handling``) on a real connection."""

from __future__ import annotations

import json

import pytest
from websockets.asyncio.server import ServerConnection, serve

from tests.worker.conftest import Fleet
from tests.worker.helpers import Recorder
from tests.worker.test_connection import connection, context, lease_for, run_until


async def test_sparse_seqs_log_one_gap_line_a_minute_not_one_a_frame(
        fleet: Fleet, unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """An upstream whose seqs skip every other number (one counter over many channels) has
    every frame delivered, and one "gap" line per stream a minute, not one per frame."""
    async def sparse(ws: ServerConnection) -> None:
        for seq in range(0, 60, 2):
            await ws.send(json.dumps({"seq": seq}))
        await ws.wait_closed()

    rec = Recorder()
    async with serve(sparse, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/feed"
        conn = f"{unique_id}-sparse"
        runner = connection(lease_for(fleet, conn, url), context(rec))
        await run_until(runner, lambda: len(rec.calls) >= 30, 10)
    assert rec.seqs(conn) == list(range(0, 60, 2))
    gaps = [r for r in caplog.records if r.getMessage() == "gap in upstream sequence"]
    assert len(gaps) == 1
