"""The recording handler writes one parseable line per sequenced message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from holdfast.fleet import recorder
from worker.handler import Message, load_handler


def test_records_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker can load the handler; lines read back; seq-less messages are skipped."""
    monkeypatch.setenv(recorder.RECORD_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(recorder, "_fds", {})
    handle = load_handler("holdfast.fleet.recorder:handle")

    async def feed() -> None:
        for seq in (0, 1, None, 2):
            await handle(Message("c1", seq, "{}", "w/1"))

    asyncio.run(feed())
    (tmp_path / "junk.seqs").write_text("torn line\nc2 x w 1\n")
    got = [(r.conn_id, r.seq, r.worker_id) for r in recorder.read_records(tmp_path)]
    assert got == [("c1", 0, "w/1"), ("c1", 1, "w/1"), ("c1", 2, "w/1")]
    assert (tmp_path / "w_1.seqs").is_file()
