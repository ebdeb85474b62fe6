"""The stop's rules (``worker.stopping``): which streams the warm phase will not reach, and
the goodbye's order."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from holdfast.worker import stopping
from holdfast.worker.stopping import goodbye, goodbye_s
from holdfast.worker.warmpace import (
    WARM_AT_ONCE_AT_STOP,
    WARM_AT_ONCE_LEAST,
    beyond_warm_reach,
    warm_at_once,
    warm_pace,
    warm_slots,
)


def test_no_stream_is_given_up_on_without_a_pace_or_time() -> None:
    """No offer begun, no slot time yet, or no time left: every stream keeps its turn."""
    assert beyond_warm_reach(900, 0, 10_000, 1_300, 20) == 0
    assert beyond_warm_reach(900, 40, 0, 1_300, 20) == 0
    assert beyond_warm_reach(900, 40, 20_000, 0, 20) == 0


def test_the_tail_beyond_the_paces_reach_is_released_now() -> None:
    """1,000 streams, 20 offers begun by 20 slots in 0.5 s, 1.3 s left: about 98 can still
    go warm."""
    # 20 / 500 ms x 1,300 ms x 1.5 = 78, plus the 20 in flight: 98 reachable of 900 waiting.
    assert beyond_warm_reach(900, 20, 20 * 500, 1_300, 20) == 802
    assert beyond_warm_reach(90, 20, 20 * 500, 1_300, 20) == 0


def test_a_long_warm_phase_reaches_every_stream() -> None:
    """The stack's 25 s budget: 12 s of warm phase reach a worker's 100 streams, though
    none of the first 20 offers, begun at once, has ended yet."""
    assert beyond_warm_reach(80, 20, 20 * 500, 11_500, 20) == 0
    assert beyond_warm_reach(80, 21, 20 * 2_000, 10_000, 20) == 0


def test_a_small_stop_hands_over_few_at_once_and_a_large_one_many() -> None:
    """100 streams in a 12 s warm phase go 6 at once (each slot reaches 18 in 3/4 of it, and
    the one in flight), 300 go 16; 1,000 in 1.8 s at the most, 20; none at all, or no phase
    left, never below the least or above the most."""
    assert warm_at_once(100, 12_000) == 6
    assert warm_at_once(300, 12_000) == 16
    assert warm_at_once(1_000, 1_800) == WARM_AT_ONCE_AT_STOP
    assert warm_at_once(0, 12_000) == WARM_AT_ONCE_LEAST
    assert warm_at_once(100, 0) == WARM_AT_ONCE_AT_STOP
    assert WARM_AT_ONCE_LEAST < WARM_AT_ONCE_AT_STOP


def test_a_stop_keeps_its_few_warm_offers_while_they_reach_the_queue() -> None:
    """6 in flight, 8 begun in 0.5 s, 92 waiting, 11.5 s left: 6 will do; no pace yet, or
    no time left: as it was."""
    assert warm_slots(92, 8, 6 * 500, 11_500, 6) == 6
    assert warm_slots(92, 0, 0, 11_500, 6) == 6
    assert warm_slots(92, 8, 3_000, 0, 6) == 6


def test_a_slow_pace_adds_warm_offers_up_to_the_most() -> None:
    """One offer per second per slot, 6 s left: each slot reaches 4 (3 in half the time left,
    and the one in flight), so 60 waiting need 15; 900 waiting in 1 s: the most, 20; never
    fewer than already in flight."""
    assert warm_slots(60, 6, 6_000, 6_000, 6) == 15
    assert warm_slots(900, 6, 6_000, 1_000, 6) == WARM_AT_ONCE_AT_STOP
    assert warm_slots(10, 6, 6_000, 6_000, 12) == 12


def test_the_warm_phase_keeps_its_slots_and_queue_until_it_has_a_pace() -> None:
    """0.4 s into a stop whose first 20 offers have not ended (a pace that reaches 98 of 900
    waiting): 20 at once and nothing drained; from 0.5 s on: the most and the tail beyond."""
    assert warm_pace(400, 900, 20, 20 * 400, 1_300, at_once=20) == (20, 0)
    assert WARM_AT_ONCE_AT_STOP == 20
    assert warm_pace(500, 900, 20, 20 * 500, 1_300, at_once=20) == (20, 802)
    assert warm_pace(500, 60, 6, 6_000, 6_000, at_once=6) == (15, 0)


def test_the_goodbye_keeps_a_tenth_of_a_short_budget() -> None:
    """At most 1 s, and a tenth of a budget shorter than 10 s."""
    assert goodbye_s(25.0) == 1.0
    assert goodbye_s(8.0) == 0.8


class _Steps:
    """The goodbye's other parties, each noting when it was called."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.session = "session"

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
                         sessions=steps, inbox=None, polls_s=0.0,  # type: ignore[arg-type]
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
                          sessions=steps, inbox=steps, polls_s=5.0,  # type: ignore[arg-type]
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
