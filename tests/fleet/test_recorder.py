"""The recording handler writes one parseable line per sequenced message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from holdfast.fleet import recorder
from holdfast.worker.handler import HandlerLoadError, Message, load_handler


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


_calls: list[tuple[str, int | None]] = []


async def _inner(message: Message) -> None:
    _calls.append(("inner", message.seq))
    if message.seq == 2:
        raise ValueError("boom")


def test_wraps_the_users_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With HOLDFAST_RECORD_WRAPS the user's handler runs first; a raise is recorded as one,
    and re-raised."""
    monkeypatch.setenv(recorder.RECORD_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(recorder.RECORD_WRAPS_ENV, f"{__name__}:_inner")
    monkeypatch.setattr(recorder, "_fds", {})
    monkeypatch.setattr(recorder, "_wrapped", {})
    _calls.clear()

    async def feed() -> None:
        await recorder.handle(Message("c1", 1, "{}", "w1"))
        with pytest.raises(ValueError, match="boom"):
            await recorder.handle(Message("c1", 2, "{}", "w1"))

    asyncio.run(feed())
    assert _calls == [("inner", 1), ("inner", 2)]
    assert [(r.seq, r.raised) for r in recorder.read_records(tmp_path)] == [(1, False),
                                                                           (2, True)]


async def _forgot_await(message: Message) -> object:
    return asyncio.sleep(0)  # the user's mistake: the coroutine returned, never run


def test_a_wrapped_handler_that_forgets_await_fails_as_in_production(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's handler returns a coroutine (a missing `await`): the call fails as the
    worker's does without the recorder, recorded as a raise (the local fleet and the test
    fixture counted it handled, production refused it)."""
    from holdfast.worker.handler import call_once

    monkeypatch.setenv(recorder.RECORD_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(recorder.RECORD_WRAPS_ENV, f"{__name__}:_forgot_await")
    monkeypatch.setattr(recorder, "_fds", {})
    monkeypatch.setattr(recorder, "_wrapped", {})
    failed = asyncio.run(call_once(recorder.handle, Message("c1", 1, "{}", "w1"), 5.0))
    assert failed is not None and "missing `await`" in failed.error
    assert [(r.seq, r.raised) for r in recorder.read_records(tmp_path)] == [(1, True)]


def test_unloadable_wrapped_handler_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrapped spec that cannot be imported raises the worker's HandlerLoadError."""
    monkeypatch.setenv(recorder.RECORD_WRAPS_ENV, "nosuchpkg.x:y")
    monkeypatch.setattr(recorder, "_wrapped", {})
    with pytest.raises(HandlerLoadError, match="nosuchpkg"):
        recorder._inner()
