"""The stop's rules (``worker.stopping``): the goodbye's share of the budget and its order."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from holdfast.worker import stopping
from holdfast.worker.stopping import goodbye, goodbye_s


def test_the_goodbye_keeps_a_tenth_of_a_short_budget() -> None:
    """At most 1 s, and a tenth of a budget shorter than 10 s."""
    assert goodbye_s(25.0) == 1.0
    assert goodbye_s(8.0) == 0.8


class _Steps:
    """The goodbye's other parties, each noting when it was called."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.session = "session"
        self.store = self  # the keeper's session store

    async def drain(self) -> None:
        self.said.append("messages")

    async def finish_polls(self, timeout_s: float) -> int:
        self.said.append("polls")
        return 0

    def stop(self) -> None:
        self.said.append("heartbeat stopped")

    def end(self, session: Any, reason: str) -> bool:
        self.said.append("session ended")
        return True


async def _goodbye(steps: _Steps, settle: Any, running: int = 0) -> dict[str, float]:
    return await goodbye(outbox=steps, claimer=steps, keeper=steps,  # type: ignore[arg-type]
                         inbox=None, polls_s=0.0,
                         releases_settled=settle, streams_running=lambda: running)


async def test_the_session_ends_after_the_releases_still_being_sent() -> None:
    """A release whose caller the budget's end cancelled lands before the session's end (the
    sweeper would race it) and before tracing shuts down."""
    steps = _Steps()

    async def settle() -> None:
        await asyncio.sleep(0.05)
        steps.said.append("releases landed")

    ended = await _goodbye(steps, settle)
    assert steps.said == ["releases landed", "messages", "polls", "heartbeat stopped",
                          "session ended"]
    assert list(ended) == ["releases", "messages", "polls", "session", "inbox"]


async def test_a_release_that_hangs_does_not_hold_the_goodbye(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait is bounded (``RELEASES_SETTLE_S``): a call hanging on DynamoDB is left to its
    thread, and the session still ends."""
    monkeypatch.setattr(stopping, "RELEASES_SETTLE_S", 0.05)
    steps = _Steps()

    async def settle() -> None:
        await asyncio.sleep(30)

    await asyncio.wait_for(_goodbye(steps, settle), 5)
    assert steps.said[-1] == "session ended"


async def test_a_stream_still_running_leaves_the_session_to_expire() -> None:
    """A handler that would not stop, even cancelled: the session is not ended (the sweeper
    would release its stream at once, and the next holder deliver beside that handler)."""
    steps = _Steps()

    async def settle() -> None:
        return None

    await _goodbye(steps, settle, running=1)
    assert "heartbeat stopped" in steps.said and "session ended" not in steps.said


async def test_an_sqs_that_does_not_answer_cannot_keep_the_session_from_ending(
        caplog: pytest.LogCaptureFixture) -> None:
    """The last messages and the order queue's deletion hang on SQS: each wait ends with the
    stop budget (the messages' SESSION_END_S before it), each said, and the session is ended
    inside the budget."""

    class Hanging(_Steps):
        async def drain(self) -> None:
            await asyncio.sleep(60)

        async def close(self) -> None:
            await asyncio.sleep(60)

    steps = Hanging()
    t0 = time.monotonic()
    ended = await goodbye(outbox=steps, claimer=steps, keeper=steps,  # type: ignore[arg-type]
                          inbox=steps, polls_s=5.0,  # type: ignore[arg-type]
                          ends_at=t0 + stopping.SESSION_END_S + 0.3)
    assert steps.said == ["polls", "heartbeat stopped", "session ended"]
    assert ended["session"] - t0 < stopping.SESSION_END_S  # room left for it
    assert time.monotonic() - t0 < stopping.SESSION_END_S + 0.3 + 0.2
    cut = [r.getMessage() for r in caplog.records if "cut short" in r.getMessage()]
    assert cut == ["stop budget spent: sending the last messages cut short",
                   "stop budget spent: deleting the order queue cut short"]


async def test_unless_told_first_cancels_its_work_with_itself() -> None:
    """The work ends when the trigger comes first (False), completes when it comes first
    (True), and is cancelled when the caller is: it ran on, starting what nobody would stop."""
    told, never = asyncio.Event(), asyncio.Event()
    told.set()
    assert not await stopping.unless_told_first(never.wait(), told.wait)
    assert await stopping.unless_told_first(asyncio.sleep(0), never.wait)
    finished: list[bool] = []

    async def work() -> None:
        await asyncio.sleep(0.2)
        finished.append(True)

    caller = asyncio.create_task(stopping.unless_told_first(work(), never.wait))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.sleep(0.3)
    assert not finished
