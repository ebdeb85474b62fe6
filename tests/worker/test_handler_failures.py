"""The handler contract: failed calls are retried, never passed; then park or skip to SQS."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest

from holdfast.core import names
from holdfast.core.exceptions import ConfigError
from holdfast.worker.backoff import Backoff
from holdfast.worker.config import load_config
from holdfast.worker.connection import Connection
from holdfast.worker.context import ConnectionContext
from holdfast.worker.handler import FailureQueue, Message, failure_body
from holdfast.worker.held import HeldStream
from tests.worker.conftest import Fleet, RouterSim, UpstreamThread, async_wait_until
from tests.worker.helpers import item_attr, running_worker
from tests.worker.scripted import scripted_upstream
from tests.worker.test_connection import connection, context, lease_for, run_until

FIVE = [json.dumps({"seq": n, "data": f"m{n}"}) for n in range(1, 6)]


class Sink:
    """A user's sink: stores a seq only when the call succeeds; fails while ``failing(seq)``."""

    def __init__(self, failing: Callable[[int], bool] = lambda _: False) -> None:
        self.failing = failing
        self.stored: list[int] = []
        self.calls: list[int] = []
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        assert message.seq is not None
        self.calls.append(message.seq)
        if self.failing(message.seq):
            raise ConnectionError(f"downstream down at {message.seq}")
        self.stored.append(message.seq)
        self.messages.append(message)


class Sleeps:
    """An injected sleep: records each back-off and returns at once (no wall-clock wait)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay_s: float) -> None:
        self.delays.append(delay_s)
        await asyncio.sleep(0)


def _ctx(sink: Sink, sleeps: Sleeps | None = None, **kw: Any) -> ConnectionContext:
    kw.setdefault("sleep", sleeps or Sleeps())
    ctx = context(None, **kw)  # type: ignore[arg-type]
    ctx.handler = sink
    return ctx


async def _run(runner: Connection, within_s: float = 10) -> str | None:
    """Run the connection until it returns by itself (parked) or ``within_s`` passed."""
    runner.task = asyncio.create_task(runner.run())
    done, _ = await asyncio.wait({runner.task}, timeout=within_s)
    if not done:
        runner.drain("test over")
    return await asyncio.wait_for(runner.task, 5)


async def test_a_failed_call_is_retried_with_backoff_then_succeeds(
        fleet: Fleet, unique_id: str) -> None:
    """Seq 3 fails twice: retried after growing back-offs, then stored; nothing skipped."""
    failures = {3: 2}

    def failing(seq: int) -> bool:
        failures[seq] = failures.get(seq, 0) - 1
        return failures[seq] >= 0

    sink, sleeps = Sink(failing), Sleeps()
    async with scripted_upstream(lambda _: FIVE) as up:
        ctx = _ctx(sink, sleeps, handler_backoff=Backoff(1.0, 30.0))
        runner = connection(lease_for(fleet, f"{unique_id}-r", up.url), ctx)
        assert await run_until(runner, lambda: sink.stored == [1, 2, 3, 4, 5], 10) is None
    assert sink.calls == [1, 2, 3, 3, 3, 4, 5]
    assert len(sleeps.delays) == 2 and 0.5 <= sleeps.delays[0] <= 1 <= sleeps.delays[1] <= 2
    assert ctx.metrics.totals["HandlerErrors"] == 2 and runner.held.checkpoint == 5


async def test_a_failed_calls_first_error_line_carries_where_the_handler_failed(
        fleet: Fleet, unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """The first "handler raised" line of a message has the exception's traceback (the
    author's line that raised); its retries say the error only."""
    failures = {3: 2}

    def failing(seq: int) -> bool:
        failures[seq] = failures.get(seq, 0) - 1
        return failures[seq] >= 0

    caplog.set_level("ERROR", logger="holdfast-worker.holdfast.worker.connection")
    sink = Sink(failing)
    async with scripted_upstream(lambda _: FIVE) as up:
        runner = connection(lease_for(fleet, f"{unique_id}-t", up.url), _ctx(sink))
        assert await run_until(runner, lambda: sink.stored == [1, 2, 3, 4, 5], 10) is None
    raised = [r for r in caplog.records if r.getMessage() == names.LOG_HANDLER_RAISED]
    assert len(raised) == 2 and raised[0].exc_info and raised[1].exc_info is None
    assert raised[0].exc_info[2] is not None and "raise ConnectionError" in "".join(
        traceback.format_tb(raised[0].exc_info[2]))


async def test_a_timeout_counts_as_a_failure_and_is_retried(fleet: Fleet, unique_id: str) -> None:
    """Seq 2's first call hangs past the timeout: cancelled, counted, retried, stored."""
    stored: list[int] = []
    hung: list[int] = []

    async def hang_once(message: Message) -> None:
        assert message.seq is not None
        if message.seq == 2 and not hung:
            hung.append(2)
            await asyncio.sleep(3600)
        stored.append(message.seq)

    async with scripted_upstream(lambda _: FIVE) as up:
        ctx = context(None, handler_timeout_s=0.2, sleep=Sleeps())  # type: ignore[arg-type]
        ctx.handler = hang_once
        runner = connection(lease_for(fleet, f"{unique_id}-t", up.url), ctx)
        assert await run_until(runner, lambda: stored == [1, 2, 3, 4, 5], 10) is None
    assert ctx.metrics.totals["HandlerTimeouts"] == 1 and runner.held.checkpoint == 5


async def test_after_the_last_attempt_the_stream_parks_on_the_failed_seq(
        fleet: Fleet, unique_id: str) -> None:
    """Seq 3 always fails: 3 calls, then run() gives the stream back naming seq 3; checkpoint 2."""
    sink = Sink(lambda seq: seq == 3)
    async with scripted_upstream(lambda _: FIVE) as up:
        runner = connection(lease_for(fleet, f"{unique_id}-p", up.url),
                            _ctx(sink, handler_attempts=3))
        error = await _run(runner)
    assert error is not None and "seq 3" in error and "ConnectionError" in error
    assert sink.calls == [1, 2, 3, 3, 3] and sink.stored == [1, 2]
    assert runner.held.checkpoint == 2  # the next holder resumes from seq 3


async def test_a_frame_without_a_seq_that_always_fails_is_said_to_be_lost(
        fleet: Fleet, unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """A binary frame (no seq) failing every attempt under park: the stream parks, and both
    the log and last_error say that frame is lost (no resume point), not "resume from it"."""
    async def fails_on_bytes(message: Message) -> None:
        if message.seq is None:
            raise ConnectionError("downstream down")

    caplog.set_level("ERROR", logger="holdfast-worker.holdfast.worker.connection")
    async with scripted_upstream(lambda _: [FIVE[0], b"\x00binary", FIVE[1]]) as up:
        ctx = _ctx(Sink(), handler_attempts=2)
        ctx.handler = fails_on_bytes
        runner = connection(lease_for(fleet, f"{unique_id}-n", up.url), ctx)
        error = await _run(runner)
    assert error is not None and "without a seq" in error and "resume from it" not in error
    assert any("is lost" in r.getMessage() for r in caplog.records)
    assert runner.held.checkpoint == 1


async def test_skip_sends_to_the_queue_before_the_checkpoint_passes(
        fleet: Fleet, unique_id: str) -> None:
    """skip: seq 3's body reaches SQS (checkpoint still 2 then), and only after it moves on."""
    queue_url = fleet.sqs.create_queue(QueueName=f"hf-fail-{unique_id}")["QueueUrl"]
    sink, seen_at_send = Sink(lambda seq: seq == 3), []
    queue = FailureQueue(queue_url, fleet.sqs)
    runner: Connection | None = None

    async def send(body: str) -> None:
        assert runner is not None
        seen_at_send.append(runner.held.checkpoint)
        await queue.send(body)

    async with scripted_upstream(lambda _: FIVE) as up:
        ctx = _ctx(sink, handler_attempts=2, on_failure=names.HANDLER_ON_FAILURE_SKIP,
                   send_failure=send)
        runner = connection(lease_for(fleet, f"{unique_id}-s", up.url), ctx)
        assert await run_until(runner, lambda: sink.stored == [1, 2, 4, 5], 10) is None
    assert seen_at_send == [2] and runner.held.checkpoint == 5
    (msg,) = fleet.sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"]
    body = json.loads(msg["Body"])
    assert set(body) == set(names.FAILURE_FIELDS)
    assert (body["conn_id"], body["seq"], body["attempts"], body["worker_id"]) == (
        f"{unique_id}-s", 3, 2, "me")
    assert body["epoch"] == runner.held.lease.epoch and "downstream down at 3" in body["error"]
    assert body["payload"] == FIVE[2] and body["payload_truncated"] is False


async def test_past_the_fence_a_failed_message_is_not_sent_to_the_queue(
        fleet: Fleet, unique_id: str) -> None:
    """skip, and the process paused past the fence during seq 3's last attempt: the stream is
    fenced, seq 3 never reaches the on-failure queue (its next holder has it), checkpoint 2."""
    sent: list[str] = []
    clock = [0]

    def failing(seq: int) -> bool:
        if seq == 3 and sink.calls.count(3) == 2:
            clock[0] = 60_000  # the last attempt returned a minute later, past the fence
        return seq == 3

    async def send(body: str) -> None:
        sent.append(body)

    sink = Sink(failing)
    async with scripted_upstream(lambda _: FIVE) as up:
        ctx = _ctx(sink, handler_attempts=2, on_failure=names.HANDLER_ON_FAILURE_SKIP,
                   send_failure=send, mono=lambda: clock[0])
        runner = Connection(HeldStream(lease_for(fleet, f"{unique_id}-x", up.url),
                                       fence_mono_ms=30_000), ctx)
        await _run(runner, within_s=3)
    assert sink.calls == [1, 2, 3, 3] and sent == [] and runner.held.checkpoint == 2
    assert ctx.metrics.totals["LeasesFenced"] == 1


async def test_a_refused_send_parks_instead(fleet: Fleet, unique_id: str) -> None:
    """skip with a queue that refuses the send: the stream parks on seq 3, nothing passed."""
    missing = fleet.queue_url.rsplit("/", 1)[0] + f"/no-such-queue-{unique_id}"
    sink = Sink(lambda seq: seq == 3)
    async with scripted_upstream(lambda _: FIVE) as up:
        ctx = _ctx(sink, handler_attempts=2, on_failure=names.HANDLER_ON_FAILURE_SKIP,
                   send_failure=FailureQueue(missing, fleet.sqs).send)
        runner = connection(lease_for(fleet, f"{unique_id}-f", up.url), ctx)
        error = await _run(runner)
    assert error is not None and "seq 3" in error and "on-failure queue refused" in error
    assert sink.stored == [1, 2] and runner.held.checkpoint == 2


async def test_a_drain_during_retries_leaves_the_seq_unpassed(
        fleet: Fleet, unique_id: str) -> None:
    """A stop order while seq 3 is being retried: the stream stops, checkpoint stays at 2."""
    sink = Sink(lambda seq: seq == 3)
    async with scripted_upstream(lambda _: FIVE) as up:
        ctx = _ctx(sink, handler_attempts=100, sleep=asyncio.sleep,
                   handler_backoff=Backoff(0.05, 0.05))
        runner = connection(lease_for(fleet, f"{unique_id}-d", up.url), ctx)
        assert await run_until(runner, lambda: sink.calls.count(3) >= 3, 10) is None
    assert sink.stored == [1, 2] and runner.held.checkpoint == 2


async def test_another_stream_keeps_delivering_during_retries(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """Stream a's handler fails for a while; stream b on the same loop goes on meanwhile."""
    a, b = f"{unique_id}-a", f"{unique_id}-b"
    down = [True]
    sink = Sink(lambda _: False)

    async def handler(message: Message) -> None:
        if message.conn_id == a and down[0]:
            raise ConnectionError("downstream of a is down")
        await sink(message)

    ctx = context(None, handler_attempts=100,  # type: ignore[arg-type]
                  handler_backoff=Backoff(0.05, 0.2))
    ctx.handler = handler
    runners = [connection(lease_for(fleet, c, upstream.url(c)), ctx) for c in (a, b)]
    for r in runners:
        r.task = asyncio.create_task(r.run())
    try:
        await async_wait_until(lambda: ctx.metrics.totals["HandlerErrors"] >= 3, 10, "retries")
        a_stuck, b_before = runners[0].held.checkpoint, runners[1].held.checkpoint or 0
        await async_wait_until(lambda: (runners[1].held.checkpoint or 0) >= b_before + 5, 10,
                               "b delivering while a retries")
        assert runners[0].held.checkpoint == a_stuck  # a has passed nothing meanwhile
        assert not [m for m in sink.messages if m.conn_id == a]
        down[0] = False
        await async_wait_until(lambda: (runners[0].held.checkpoint or 0) >= (a_stuck or 0) + 3,
                               10, "a recovers")
    finally:
        for r in runners:
            r.drain("test over")
        await asyncio.gather(*(asyncio.wait_for(r.task, 5) for r in runners if r.task))
    for r in runners:  # each stream's sink holds every seq up to its checkpoint
        stored = [m.seq for m in sink.messages if m.conn_id == r.conn_id]
        assert stored == list(range(stored[0], (r.held.checkpoint or 0) + 1))


async def test_a_handler_down_for_many_park_cycles_loses_nothing(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """Default policy (park): a sink down across several park/resume cycles, then back up,
    stores every seq from the first to the checkpoint. The 60 s target, on short settings:
    the same park, BACKOFF and resume, with retries and retry times of milliseconds."""
    conn = f"{unique_id}-outage"
    down = [True]
    sink = Sink(lambda _: down[0])
    fleet.create(conn, upstream.url(conn))
    router = RouterSim(fleet)
    statuses: set[str] = set()
    errors: set[str] = set()
    try:
        async with running_worker(fleet, sink, HOLDFAST_HANDLER_ATTEMPTS="3",
                                  HOLDFAST_HANDLER_RETRY_BASE_SECONDS="0.01",
                                  HOLDFAST_HANDLER_RETRY_CAP_SECONDS="0.05",
                                  HOLDFAST_RETRY_BASE_SECONDS="0.1") as run:
            fleet.nudge(conn)
            deadline = time.monotonic() + 20
            # Down until the stream was parked (BACKOFF) and resumed at least twice.
            while run.worker.metrics.totals["UpstreamGiveUps"] < 2 and \
                    time.monotonic() < deadline:
                item = fleet.item(conn)
                statuses.add(str(item_attr(item, "status")))
                errors.add(str(item_attr(item, "last_error")))
                await asyncio.sleep(0.05)
            assert run.worker.metrics.totals["UpstreamGiveUps"] >= 2, "never parked twice"
            assert not sink.stored  # down all along: nothing stored, nothing passed
            # Every resumed holding retried the failed seq first (and only it).
            assert len(set(sink.calls)) == 1 and len(sink.calls) >= 6
            assert any(f"seq {sink.calls[0]}" in e and "ConnectionError" in e for e in errors)
            down[0] = False
            await async_wait_until(lambda: len(sink.stored) >= 20, 20, "the sink recovered")
    finally:
        router.stop()
    item = fleet.item(conn)
    checkpoint = item_attr(item, "last_seq")
    first = min(sink.calls)
    assert sorted(set(sink.stored)) == list(range(first, checkpoint + 1))
    assert "BACKOFF" in statuses  # parked through the existing give-up release


def test_failure_body_fields_bytes_and_truncation() -> None:
    """Bytes go as base64; a body over SQS's limit keeps every field but the payload."""
    msg = Message("c1", 7, b"\x00\xff", "w1", epoch=42)
    body = json.loads(failure_body(msg, "boom", 5))
    assert body["payload_encoding"] == "base64"
    assert base64.b64decode(body["payload"]) == b"\x00\xff" and body["payload_bytes"] == 2
    big = Message("c1", 8, "é" * 200_000, "w1", epoch=42)
    text = failure_body(big, "boom", 5)
    assert len(text.encode()) <= names.SQS_MAX_BODY_BYTES
    cut = json.loads(text)
    assert cut["payload"] is None and cut["payload_truncated"] is True
    assert (cut["seq"], cut["epoch"], cut["payload_bytes"]) == (8, 42, 400_000)


def test_settings_defaults_limits_and_skip_needs_a_queue(fleet: Fleet) -> None:
    """Defaults: 5 attempts, park; skip without a queue URL is an error naming the variable."""
    cfg = load_config({**fleet.env, "HOLDFAST_WORKER_ID": "w1"}).failures
    assert (cfg.attempts, cfg.on_failure, cfg.queue_url) == (5, "park", None)
    with pytest.raises(ConfigError, match=names.ENV_FAILURE_QUEUE_URL):
        load_config({**fleet.env, names.ENV_HANDLER_ON_FAILURE: "skip"})
    with pytest.raises(ConfigError, match=names.ENV_HANDLER_ATTEMPTS):
        load_config({**fleet.env, names.ENV_HANDLER_ATTEMPTS: "101"})
    with pytest.raises(ConfigError, match=names.ENV_HANDLER_ON_FAILURE):
        load_config({**fleet.env, names.ENV_HANDLER_ON_FAILURE: "drop"})
    skip = load_config({**fleet.env, names.ENV_HANDLER_ON_FAILURE: "skip",
                        names.ENV_FAILURE_QUEUE_URL: fleet.queue_url}).failures
    assert (skip.on_failure, skip.queue_url) == ("skip", fleet.queue_url)
