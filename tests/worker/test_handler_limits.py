"""The handler's limits: a per-call timeout, and the watchdog for a handler blocking the loop."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable

from holdfast.core import names
from holdfast.worker.backoff import Backoff
from holdfast.worker.handler import Message, call_once
from holdfast.worker.held import NO_FENCE_MS
from holdfast.worker.loopclock import LoopClock
from holdfast.worker.watchdog import EXIT_CODE, Watchdog
from tests.worker.conftest import Fleet, WorkerProc, seqs_by_stream
from tests.worker.scripted import scripted_upstream
from tests.worker.test_connection import connection, context, lease_for


async def test_a_handler_call_over_the_timeout_is_cancelled_and_never_passed(
        fleet: Fleet, unique_id: str) -> None:
    """Seq 2 hangs every call: each is cut at the timeout and counted; the stream parks on 2."""
    conn, handled = f"{unique_id}-slow", []
    frames = [json.dumps({"seq": n}) for n in range(1, 6)]

    async def hang_on_2(message: Message) -> None:
        if message.seq == 2:
            await asyncio.sleep(3600)
        handled.append(message.seq)

    async with scripted_upstream(lambda _: frames) as up:
        ctx = context(None, handler_timeout_s=0.2, handler_attempts=2,  # type: ignore[arg-type]
                      handler_backoff=Backoff(0.01, 0.01))
        ctx.handler = hang_on_2
        runner = connection(lease_for(fleet, conn, up.url), ctx)
        runner.task = asyncio.create_task(runner.run())
        error = await asyncio.wait_for(runner.task, 10)
    assert error is not None and "seq 2" in error and "timed out" in error
    assert ctx.metrics.totals["HandlerTimeouts"] == 2 and ctx.metrics.totals["HandlerErrors"] == 0
    assert handled == [1] and runner.held.checkpoint == 1


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _run_thread(dog: Watchdog, clock: Clock, until_ms: int, step_ms: int = 100) -> bool:
    """The watchdog thread's checks every ``step_ms`` up to ``until_ms``; True once it exited."""
    while clock.now < until_ms:
        clock.now = min(until_ms, clock.now + step_ms)
        if dog.check():
            return True
    return False


def test_watchdog_exits_only_when_the_loop_is_stuck_past_a_fence() -> None:
    """A stale stamp alone, or a passed fence alone, is not enough; both together exit 70."""
    clock, exits, fence = Clock(), [], [5000]
    loop = LoopClock(clock)
    dog = Watchdog(lambda: fence[0], loop, stall_ms=1000, exit=exits.append)
    loop.stamp()
    assert not _run_thread(dog, clock, 4000)  # stuck 4 s, fence not reached
    loop.stamp()
    assert _run_thread(dog, clock, 5500) and exits == [EXIT_CODE]  # past the fence, stuck
    exits.clear()
    fence[0] = NO_FENCE_MS  # stuck, but holding nothing: never
    assert not _run_thread(dog, clock, 20_000) and not exits


def test_watchdog_spares_a_loop_that_keeps_stamping() -> None:
    """Past the fence with a fresh stamp is the fence watcher's job, not the watchdog's."""
    clock, exits = Clock(), []
    loop = LoopClock(clock)
    dog = Watchdog(lambda: 100, loop, stall_ms=1000, exit=exits.append)
    clock.now = 5000
    loop.stamp()
    assert not _run_thread(dog, clock, 5900) and not exits


def test_watchdog_spares_a_process_that_was_paused_whole() -> None:
    """SIGSTOP then SIGCONT: the thread slept too, so the loop gets a stall period to stamp."""
    clock, exits = Clock(), []
    loop = LoopClock(clock)
    dog = Watchdog(lambda: 3000, loop, stall_ms=1000, exit=exits.append)
    loop.stamp()
    assert not _run_thread(dog, clock, 1000)
    clock.now = 7000  # paused for 6 s, past the fence: neither thread nor loop ran
    assert not dog.check() and not exits
    loop.stamp()  # the loop is back and fences its streams itself
    assert not _run_thread(dog, clock, 7500) and not exits
    # Still not stamping a stall period after the pause: now it is the loop that is stuck.
    assert _run_thread(dog, clock, 9000) and exits == [EXIT_CODE]


def test_the_watchdogs_park_never_keeps_a_blocked_handler_past_the_fence_margin() -> None:
    """A handler blocks the loop past the fence and the park write hangs (a throttled table):
    the exit comes before fence + margin, where another worker may hold the stream. The park
    was waited for up to 2 s, the handler running on all that time."""
    started, release, parking = threading.Event(), threading.Event(), threading.Event()

    async def blocking(message: Message) -> None:
        started.set()
        release.wait(10)  # blocks the loop, as a synchronous handler does

    loop_threads: list[int] = []

    def run_loop() -> None:
        loop_threads.append(threading.get_ident())
        asyncio.run(call_once(blocking, Message("c", 7, "{}", "w1", epoch=1), 30))

    thread = threading.Thread(target=run_loop, daemon=True)
    thread.start()
    try:
        assert started.wait(5)
        loop = LoopClock()
        loop.loop_thread = loop_threads[0]
        loop.stamp_ms = loop.mono() - 20_000  # not stamped for 20 s
        fence, exited = loop.mono() - 50, []  # the earliest fence passed 50 ms ago

        def hanging_park(message: Message, why: str) -> None:
            parking.set()
            release.wait(10)

        dog = Watchdog(lambda: fence, loop, park=hanging_park, margin_ms=400,
                       exit=lambda code: exited.append(loop.mono()))
        dog._resumed_ms = loop.mono() - 20_000  # the watchdog thread ran all along
        assert dog.check()
        assert parking.is_set() and exited[0] - fence < 400, exited[0] - fence
    finally:
        release.set()
        thread.join(5)


def test_a_handler_blocking_the_loop_past_the_fence_ends_the_process(
        fleet: Fleet, spawn: Callable[..., WorkerProc], unique_id: str) -> None:
    """time.sleep in the handler past the fence: the watchdog exits 70 mid-call, and its line
    shows where the loop was stuck (the handler's frame); the stream is parked first, on the
    stuck seq with that line, so its next holder does not die on the same message; the give-up
    is counted and the metrics flushed before the exit."""
    async def serve_and_wait() -> int:
        frames = [json.dumps({"seq": n}) for n in range(1, 10)]
        async with scripted_upstream(lambda _: frames) as up:
            conn = f"{unique_id}-block"
            fleet.create(conn, up.url)
            w = spawn(fleet.env, HOLDFAST_HANDLER="tests.worker.recording_handler:block_on_3",
                      HOLDFAST_ALLOWED_HOSTS="127.0.0.1", HOLDFAST_TEST_BLOCK_SECONDS="60")
            fleet.nudge(conn)
            loop = asyncio.get_running_loop()
            code = await loop.run_in_executor(None, w.wait, 30)
            assert seqs_by_stream(w.handled())[conn] == [1, 2, 3]
            log = w.log_path.read_text()
            assert "holdfast watchdog: event loop blocked" in log
            assert "blocked at:" in log and "in block_on_3" in log
            item = fleet.item(conn)
            assert item["status"] == {"S": "BACKOFF"} and item["last_seq"] == {"N": "2"}
            assert "lease_owner" not in item and "blocked the event loop" in (
                item["last_error"]["S"]) and "seq 3" in item["last_error"]["S"]
            assert int(item["lease_expires_at_ms"]["N"]) > time.time() * 1000 + 20_000
            # Counted as a give-up, and printed before the exit (StreamsGivingUp sees it).
            records = [json.loads(line) for line in log.splitlines()
                       if line.startswith("{") and '"_aws"' in line]
            counted = [r.get(names.METRIC_UPSTREAM_GIVE_UPS, 0) for r in records]
            assert sum(sum(c) if isinstance(c, list) else c for c in counted) == 1, counted
            return code

    assert asyncio.run(serve_and_wait()) == EXIT_CODE
