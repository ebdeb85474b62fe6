"""Bad frames: unparseable, absurd or reset seqs, and frames that kill the connection."""

from __future__ import annotations

import asyncio
import json

import pytest

from holdfast.worker.backoff import Backoff
from holdfast.worker.connection import LOG_EVERY_MS, Connection
from holdfast.worker.context import ConnectionContext
from holdfast.worker.delivery import STALL_AFTER
from holdfast.worker.dial import ConnectOptions
from tests.worker.conftest import Fleet
from tests.worker.helpers import Recorder, item_attr, nudge_until_backoff, running_worker
from tests.worker.scripted import scripted_upstream
from tests.worker.test_connection import connection, context, lease_for, run_until

DEEP = '{"a": ' * 20_000 + "1" + "}" * 20_000  # RecursionError in json.loads


def seqs(first: int, last: int) -> list[str]:
    return [json.dumps({"seq": n}) for n in range(first, last + 1)]


def _killed_by_big_frames(rec: Recorder, max_failures: int) -> ConnectionContext:
    """Connections that a frame over 64 KiB kills, reconnected at once."""
    return context(rec, options=ConnectOptions(max_size=64 * 1024),
                   backoff=Backoff(0.01, 0.05, max_failures))


async def _run_to_its_end(runner: Connection) -> str | None:
    """The stream run until it ends by itself (given up): its error."""
    runner.task = asyncio.create_task(runner.run())
    return await asyncio.wait_for(runner.task, 10)


async def test_unparseable_frames_pass_and_later_frames_flow(fleet: Fleet,
                                                             unique_id: str) -> None:
    """Deep nesting and non-JSON text reach the handler without a seq, once counted each."""
    conn, rec = f"{unique_id}-deep", Recorder()
    frames = [*seqs(1, 3), DEEP, "not json", *seqs(4, 6)]
    async with scripted_upstream(lambda _: frames) as up:
        lease = lease_for(fleet, conn, up.url)
        runner = connection(lease, context(rec))
        assert await run_until(runner, lambda: rec.seqs(conn) == [1, 2, 3, 4, 5, 6], 10) is None
    assert [m.data for m in rec.calls if m.seq is None] == [DEEP, "not json"]
    assert runner.ctx.metrics.totals["MalformedFrames"] == 2
    assert runner.ctx.metrics.totals["Reconnects"] == 0 and runner.held.checkpoint == 6
    assert {m.epoch for m in rec.calls} == {lease.epoch} and lease.epoch >= 1


async def test_an_absurd_seq_is_refused_and_the_checkpoint_kept(fleet: Fleet,
                                                                unique_id: str) -> None:
    """{"seq": 2**63-1} is not handled and does not become the checkpoint; 4.. still flow."""
    conn, rec = f"{unique_id}-jump", Recorder()
    frames = [*seqs(1, 3), json.dumps({"seq": 2**63 - 1}), *seqs(4, 6)]
    async with scripted_upstream(lambda _: frames) as up:
        runner = connection(lease_for(fleet, conn, up.url), context(rec))
        runner.held.cursor._max_jump = 1000  # what the supervisor passes from the config
        assert await run_until(runner, lambda: rec.seqs(conn) == [1, 2, 3, 4, 5, 6], 10) is None
    assert runner.held.checkpoint == 6 and runner.ctx.metrics.totals["FramesSkipped"] == 1


async def test_a_frame_that_keeps_killing_the_connection_gives_the_stream_up(
        fleet: Fleet, unique_id: str) -> None:
    """Seq 5 over max_size kills 3 connections in a row: given up, never skipped unhandled."""
    conn, rec = f"{unique_id}-poison", Recorder()
    huge = json.dumps({"seq": 5, "pad": "x" * 100_000})

    def frames(from_seq: int | None) -> list[str]:
        start = from_seq or 1
        return [huge if n == 5 else f for n, f in zip(range(start, 11), seqs(start, 10),
                                                       strict=True)]

    async with scripted_upstream(frames) as up:
        runner = connection(lease_for(fleet, conn, up.url), _killed_by_big_frames(rec, 6))
        error = await _run_to_its_end(runner)
    assert error is not None and "resuming from seq 5 (3 times in a row)" in error
    assert "1009" in error and "not skipped" in error
    assert rec.seqs(conn) == [1, 2, 3, 4] and runner.held.checkpoint == 4
    assert up.from_seqs == [None, 5, 5]
    assert runner.ctx.metrics.totals["FramesSkipped"] == 0


async def test_a_stream_without_seqs_is_not_given_up_for_deaths_it_delivered_between(
        fleet: Fleet, unique_id: str) -> None:
    """No seqs, and every connection hands on 20 frames before one over max_size kills it:
    no death follows another with nothing handled between, so it reconnects on (the third
    such death gave it up as "a frame kills the connection before the first seq")."""
    conn, rec = f"{unique_id}-seqless", Recorder()
    huge = "x" * 100_000

    def frames(_from_seq: int | None) -> list[str]:
        return [*(f"hello {n}" for n in range(20)), huge]

    async with scripted_upstream(frames) as up:
        runner = connection(lease_for(fleet, conn, up.url), _killed_by_big_frames(rec, 20))
        assert await run_until(runner, lambda: len(up.from_seqs) >= 5, 10) is None
    assert len(rec.calls) >= 80 and runner.ctx.metrics.totals["Reconnects"] >= 4


async def test_a_stream_without_seqs_killed_with_nothing_handled_between_is_given_up(
        fleet: Fleet, unique_id: str) -> None:
    """No seqs, and every connection opens with a frame over max_size: three deaths with
    nothing handled between are in a row, and the stream is given up, naming no seq."""
    conn, rec = f"{unique_id}-seqless-dead", Recorder()
    async with scripted_upstream(lambda _: ["x" * 100_000]) as up:
        runner = connection(lease_for(fleet, conn, up.url), _killed_by_big_frames(rec, 20))
        error = await _run_to_its_end(runner)
    assert error is not None and "before the first seq (3 times in a row)" in error
    assert not rec.calls and len(up.from_seqs) == 3


async def test_oversized_first_frames_end_in_backoff_at_the_last_handled_seq(
        fleet: Fleet, unique_id: str) -> None:
    """A restarted upstream that opens every connection with an oversized frame: BACKOFF with
    the reason, and last_seq stays at the last seq the handler saw (80)."""
    conn, rec = f"{unique_id}-restart", Recorder()
    huge = json.dumps({"seq": 1, "pad": "x" * 8_000})  # its numbering restarted, and too big

    def frames(from_seq: int | None) -> list[str]:
        return [*seqs(1, 80), huge] if from_seq is None else [huge]

    async with scripted_upstream(frames) as up:
        fleet.create(conn, up.url)
        async with running_worker(fleet, rec, HOLDFAST_MAX_FRAME_BYTES="4096") as run:
            await nudge_until_backoff(fleet, conn, 15, "give-up")
            assert run.worker.metrics.totals["UpstreamGiveUps"] == 1
    item = fleet.item(conn)
    assert rec.seqs(conn) == list(range(1, 81)) and item_attr(item, "last_seq") == 80
    assert "kills the connection resuming from seq 81" in item_attr(item, "last_error")
    assert "1009" in item_attr(item, "last_error") and "lease_owner" not in item
    assert up.from_seqs == [None, 81, 81]


async def test_an_upstream_reset_is_logged_and_the_stream_given_up(
        fleet: Fleet, unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """Numbering restarted at 1 under checkpoint 500: nothing handled, logged, counted, and
    the stream ends in BACKOFF saying the seq went back; last_seq stays 500."""
    conn, rec = f"{unique_id}-reset", Recorder()
    async with scripted_upstream(lambda _: seqs(1, 300)) as up:
        fleet.create(conn, up.url)
        fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{conn}"}},
                              UpdateExpression="SET last_seq = :s",
                              ExpressionAttributeValues={":s": {"N": "500"}})
        async with running_worker(fleet, rec) as run:
            await nudge_until_backoff(fleet, conn, 15, "give-up")
            assert run.worker.metrics.totals["FramesSkipped"] == STALL_AFTER
    item = fleet.item(conn)
    assert not rec.calls and item_attr(item, "last_seq") == 500
    error = item_attr(item, "last_error")
    assert "seq went back to 100, at or below the checkpoint 500" in error
    assert f"{STALL_AFTER} frames in a row" in error and "upstream reset?" in error
    went_back = [r for r in caplog.records if "seq went back to" in r.getMessage()]
    assert len(went_back) == 1 and went_back[0].getMessage().startswith("seq went back to 1,")


async def test_broken_seqs_are_logged_at_most_once_a_minute_per_stream(
        fleet: Fleet, unique_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """Repeated jumps are counted each, logged once a minute with how many were left out."""
    conn, rec, now = f"{unique_id}-rate", Recorder(), [0]
    absurd = json.dumps({"seq": 2**63 - 1})

    def frames(_: int | None) -> list[str]:
        return [*seqs(1, 2), absurd, absurd, *seqs(3, 4), absurd]

    async with scripted_upstream(frames) as up:
        runner = connection(lease_for(fleet, conn, up.url), context(rec, mono=lambda: now[0]))
        runner.held.cursor._max_jump = 1000
        totals = runner.ctx.metrics.totals
        assert await run_until(runner, lambda: rec.seqs(conn) == [1, 2, 3, 4] and totals[
            "FramesSkipped"] == 3, 10) is None
        now[0] += LOG_EVERY_MS
        runner.log_limited("refused_jump", "error", "later")  # the minute is over: logged
    lines = [vars(r) for r in caplog.records
             if r.getMessage().startswith("seq jumps to") or r.getMessage() == "later"]
    assert [line["suppressed"] for line in lines] == [0, 2]
