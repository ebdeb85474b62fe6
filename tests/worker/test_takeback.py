"""The holder's take-back of a stream whose item an app's PutItem wrote over (``worker.takeback``):
found by a refused checkpoint or a handoff's refused transfer, on DynamoDB Local."""

from __future__ import annotations

import time
from typing import Any

import pytest

from holdfast.core.exceptions import LeaseLost, LossReason, StoreUnavailable
from holdfast.core.handoff import READY, HandoffStep
from holdfast.core.model import Lease, LeaseItem
from holdfast.core.orders import Order
from holdfast.core.schema import ATTR, BACKSTOP_MS
from holdfast.core.store import LeaseStore
from holdfast.core.table import inserted_item
from holdfast.worker.handler import Message
from holdfast.worker.held import SHUTDOWN, STOPPED
from tests.worker.conftest import Fleet, UpstreamThread, async_wait_until
from tests.worker.helpers import (
    Recorder,
    item_attr,
    nudge_until_backoff,
    running_worker,
    start_held,
)
from tests.worker.test_checkpointer import runner_for
from tests.worker.test_stop_seams import SUCCESSOR, _offered


def written_over(fleet: Fleet, conn: str, url: str = "ws://127.0.0.1:1/s/x") -> None:
    """An app's PutItem of the stream's whole item (``Pk``, STARTED, ``url``)."""
    fleet.ddb.put_item(TableName=fleet.table, Item=inserted_item(conn, url))


async def test_a_stream_whose_item_was_written_over_is_taken_back_and_goes_on(
        fleet: Fleet, unique_id: str) -> None:
    """An app's PutItem of the whole item over a held stream: the refused checkpoint reads
    OVERWRITTEN and the holder writes back its owner, epoch and checkpoint, the stream still
    running (it was lost: stopped, and another claim resumed without the checkpoint)."""
    conn = f"{unique_id}-over"
    writer, runner = runner_for(fleet, conn, 7)
    written_over(fleet, conn)
    await writer.write()
    await async_wait_until(lambda: writer.metrics.totals["HoldingsTakenBack"] == 1, 5,
                           "taken back")
    assert runner.held.live and not writer.metrics.totals["LeasesLost"]
    item = fleet.item(conn)
    assert (item_attr(item, "lease_owner"), item_attr(item, "lease_epoch")) == (
        "me", runner.held.lease.epoch)
    await writer.write()  # the next round writes its checkpoint as before
    assert item_attr(fleet.item(conn), "last_seq") == 7


async def test_a_stream_written_over_as_stopped_is_taken_back_and_drained(
        fleet: Fleet, unique_id: str) -> None:
    """Written over as STOPPED: taken back, then drained (its release writes the final
    checkpoint the write removed) instead of lost with it."""
    conn = f"{unique_id}-over-stopped"
    writer, runner = runner_for(fleet, conn, 7)
    fleet.ddb.put_item(TableName=fleet.table, Item={
        "Pk": {"S": f"CONN#{conn}"}, "desired_state": {"S": "STOPPED"},
        "ws_url": {"S": "ws://127.0.0.1:1/s/x"}})
    await writer.write()
    await async_wait_until(lambda: writer.metrics.totals["HoldingsTakenBack"] == 1, 5,
                           "taken back")
    assert runner.held.stopping and runner.held.stop_reason == STOPPED
    assert not writer.metrics.totals["LeasesLost"]
    assert item_attr(fleet.item(conn), "lease_owner") == "me"


async def test_a_stream_written_over_with_another_url_is_stopped_not_taken_back(
        fleet: Fleet, unique_id: str) -> None:
    """Another URL under the same id (deleted and created again, or an app's new URL): a
    new stream, whose seqs ours must not be written over: stopped, not taken back."""
    conn = f"{unique_id}-over-url"
    writer, runner = runner_for(fleet, conn, 7)
    written_over(fleet, conn, "ws://127.0.0.1:1/s/new")
    await writer.write()
    assert not runner.held.live and writer.metrics.totals["LeasesLost"] == 1
    assert not writer.metrics.totals["HoldingsTakenBack"]
    assert item_attr(fleet.item(conn), "lease_owner") is None


async def test_an_ordered_take_back_of_a_stream_on_another_url_stops_it(
        fleet: Fleet, unique_id: str) -> None:
    """The router's order came for a write on our URL, and a later one named another (a new
    stream under our id) before the take-back: not taken back (our owner and checkpoint on
    the new stream, our socket on the old upstream), stopped."""
    conn = f"{unique_id}-order-url"
    writer, runner = runner_for(fleet, conn, 7)
    written_over(fleet, conn, "ws://127.0.0.1:1/s/new")
    assert not await writer.takeback.retake(runner, "order")
    assert not runner.held.live and not writer.metrics.totals["HoldingsTakenBack"]
    assert item_attr(fleet.item(conn), "lease_owner") is None


async def test_a_take_back_that_gets_no_answer_stops_the_stream(fleet: Fleet,
                                                                unique_id: str) -> None:
    """The take-back's write fails (DynamoDB unreachable): the stream, unowned meanwhile and
    so claimable by another worker, stops at once, as a refused checkpoint did."""
    from botocore.config import Config

    from holdfast.core.boto import new_session

    conn = f"{unique_id}-over-dead"
    writer, runner = runner_for(fleet, conn, 7)
    writer.store = LeaseStore(new_session().client(
        "dynamodb", endpoint_url="http://127.0.0.1:1", region_name="us-east-1",
        aws_access_key_id="x", aws_secret_access_key="x",
        config=Config(connect_timeout=0.2, read_timeout=0.2, retries={"max_attempts": 1})),
        fleet.table, lease_ms=BACKSTOP_MS, skew_ms=300)
    assert not await writer.takeback.retake(runner, "test")
    assert not runner.held.live and not writer.metrics.totals["HoldingsTakenBack"]
    writer.takeback.cancel()  # its give-back would try for a minute


async def test_a_take_back_refused_for_a_claim_meanwhile_stops_the_stream(
        fleet: Fleet, unique_id: str) -> None:
    """Claimed by another worker between the write over it and the take-back: lost, stopped
    at once, nothing written over the new holder's."""
    conn = f"{unique_id}-over-taken"
    writer, runner = runner_for(fleet, conn, 7)
    written_over(fleet, conn)
    other = LeaseStore(fleet.ddb, fleet.table, lease_ms=BACKSTOP_MS, skew_ms=300)
    taken = other.acquire(conn, "other")
    assert not await writer.takeback.retake(runner, "test")
    assert not runner.held.live and writer.metrics.totals["LeasesLost"] == 1
    assert item_attr(fleet.item(conn), "lease_owner") == taken.owner


@pytest.mark.parametrize("single", [False, True], ids=["warm", "one-connection"])
async def test_a_stream_written_over_during_its_handoff_is_released_with_its_checkpoint(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str, single: bool) -> None:
    """The app's PutItem lands while the stream is handed over (its socket open, or closed
    first where one connection at a time is required): the transfer is refused, and the
    holder takes the stream back and releases it with its checkpoint (treated as lost, it
    wrote nothing, and the next holder started at the upstream's head: seqs skipped)."""
    rec, conn = Recorder(), f"{unique_id}-over-handoff-{single}"
    async with running_worker(fleet, rec,
                              HOLDFAST_SINGLE_CONNECTION="true" if single else "false") as run:
        epoch = await _offered(fleet, upstream, run, rec, conn)
        written_over(fleet, conn, upstream.url(conn))
        run.worker.handoffs.on_step(HandoffStep(READY, conn, epoch, None, SUCCESSOR))
        await async_wait_until(lambda: run.worker.metrics.totals["HoldingsTakenBack"] == 1
                               and ATTR.last_seq in (item := fleet.item(conn))
                               and ATTR.lease_owner not in item, 5, "given back")
        handled = max(rec.seqs(conn))
    item = fleet.item(conn)
    assert ATTR.lease_owner not in item and ATTR.successor not in item, item
    assert item_attr(item, ATTR.last_seq) == handled


async def test_a_stopping_stream_whose_release_finds_it_written_over_is_given_back(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """Written over while it drains for a stop: its release (no owner found) was taken as
    landed, and the checkpoint the write removed stayed removed; now it is taken back and
    released with it."""
    rec, conn = Recorder(), f"{unique_id}-over-release"
    async with running_worker(fleet, rec) as run:
        await start_held(fleet, upstream, run, [conn])
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 2, 5, "messages")
        epoch = run.worker.streams[conn].held.lease.epoch
        written_over(fleet, conn, upstream.url(conn))
        assert run.worker.carry_out(Order.stop(conn, epoch))
        await async_wait_until(lambda: run.worker.metrics.totals["HoldingsTakenBack"] == 1
                               and ATTR.last_seq in (item := fleet.item(conn))
                               and ATTR.lease_owner not in item, 5, "given back")
        handled = max(rec.seqs(conn))
    item = fleet.item(conn)
    assert ATTR.lease_owner not in item and item_attr(item, ATTR.last_seq) == handled


async def test_a_give_up_whose_release_finds_it_written_over_is_given_back_as_a_give_up(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """Written over just before its handler's last failure: the park's release finds no owner
    and gives it back with its checkpoint and as the give-up it was (BACKOFF, the error, one
    give-up in a row, the back-off's end), not as a release any worker may claim at once."""
    conn = f"{unique_id}-over-give-up"
    fleet.create(conn, upstream.url(conn))

    async def fails_at_three(message: Message) -> None:
        if message.seq == 3:
            written_over(fleet, conn, upstream.url(conn))
            raise ConnectionError("downstream down")

    async with running_worker(fleet, fails_at_three, HOLDFAST_HANDLER_ATTEMPTS="1") as run:
        await nudge_until_backoff(fleet, conn, 10, "parked")
        assert run.worker.metrics.totals["HoldingsTakenBack"] == 1
    item = fleet.item(conn)
    assert ATTR.lease_owner not in item and item_attr(item, ATTR.last_seq) == 2
    assert "downstream down" in item_attr(item, "last_error")
    assert item_attr(item, "error_count") == 1
    assert item_attr(item, ATTR.lease_expires_at_ms) > time.time() * 1000 + 20_000


async def test_an_ordered_take_back_of_an_ended_holding_whose_release_got_no_answer(
        fleet: Fleet, unique_id: str) -> None:
    """A stream fenced while DynamoDB failed, its release unanswered, then written over: the
    router's retake order for its epoch gives it back with the checkpoint it handled, past its
    fence (a soak lost 90 seqs so: the order found nothing held, and the next holder started
    at the upstream's head); an order for another epoch gives nothing back."""
    conn = f"{unique_id}-over-unreleased"
    writer, runner = runner_for(fleet, conn, 7)
    epoch = runner.held.lease.epoch
    runner.held.renewed(runner.held.lease, 0)  # its fence long past
    runner.held.lose("fenced")  # ended: its release got no answer
    writer.takeback.unreleased(runner)
    written_over(fleet, conn)
    assert not writer.takeback.ordered_back(conn, epoch - 1)
    assert writer.takeback.ordered_back(conn, epoch)
    await async_wait_until(lambda: ATTR.last_seq in (item := fleet.item(conn))
                           and ATTR.lease_owner not in item, 5, "given back")
    assert item_attr(fleet.item(conn), ATTR.last_seq) == 7
    assert writer.metrics.totals["HoldingsTakenBack"] == 1
    assert not writer.takeback.ordered_back(conn, epoch)  # once


async def test_a_worker_gives_back_a_fenced_stream_it_could_not_release_when_ordered(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The same through a worker: a stream fenced, its release unanswered, then written over;
    the router's retake order (``carry_out``) gives it back with what it handled."""
    from holdfast.core.orders import ORDER_RETAKE

    rec, conn = Recorder(), f"{unique_id}-over-fenced"
    async with running_worker(fleet, rec) as run:
        await start_held(fleet, upstream, run, [conn])
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 5, "messages")
        endings, held = run.worker.holdings.endings, run.worker.streams[conn].held
        epoch = held.lease.epoch

        async def no_answer(request: Any) -> Any:
            raise StoreUnavailable("release", "no answer")

        endings._release_gathered = no_answer  # type: ignore[method-assign]
        held.renewed(held.lease, 0)  # DynamoDB failing: its fence passes, it stops
        await async_wait_until(lambda: conn not in run.worker.streams, 5, "fenced")
        handled = max(rec.seqs(conn))
        written_over(fleet, conn, upstream.url(conn))
        assert run.worker.carry_out(Order(ORDER_RETAKE, conn, epoch))
        await async_wait_until(lambda: ATTR.last_seq in (item := fleet.item(conn))
                               and ATTR.lease_owner not in item, 5, "given back")
    assert item_attr(fleet.item(conn), ATTR.last_seq) == handled


@pytest.mark.parametrize("answered", [False, True], ids=["no-answer", "found-over"])
async def test_a_take_back_ordered_while_the_stream_ends_gives_it_back_past_the_fence(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str, answered: bool) -> None:
    """The order comes while the fenced stream's release is still being tried (it ends only
    when the release does): noted, and the stream given back past the fence, the noted order
    its proof, whether the release then got no answer (the order found it ending, did nothing,
    and none came again) or got one finding the item written over (the give-back on the
    release's finding alone stops at the fence)."""
    import asyncio

    from holdfast.core.orders import ORDER_RETAKE

    rec, conn = Recorder(), f"{unique_id}-over-ordered-{'found' if answered else 'early'}"
    async with running_worker(fleet, rec) as run:
        await start_held(fleet, upstream, run, [conn])
        await async_wait_until(lambda: len(rec.seqs(conn)) >= 3, 5, "messages")
        endings, held = run.worker.holdings.endings, run.worker.streams[conn].held
        epoch, waiting, go_on = held.lease.epoch, asyncio.Event(), asyncio.Event()
        release = endings._release_gathered

        async def held_back(request: Any) -> Any:
            waiting.set()
            await go_on.wait()
            if not answered:
                raise StoreUnavailable("release", "no answer")
            return await release(request)

        endings._release_gathered = held_back  # type: ignore[method-assign]
        held.renewed(held.lease, 0)  # DynamoDB failing: its fence passes, it stops
        await asyncio.wait_for(waiting.wait(), 5)
        handled = max(rec.seqs(conn))
        written_over(fleet, conn, upstream.url(conn))
        assert run.worker.carry_out(Order(ORDER_RETAKE, conn, epoch))  # still ending
        await asyncio.sleep(0.1)
        go_on.set()
        await async_wait_until(lambda: ATTR.last_seq in (item := fleet.item(conn))
                               and ATTR.lease_owner not in item, 5, "given back")
    assert item_attr(fleet.item(conn), ATTR.last_seq) == handled


async def test_holdings_remembered_for_a_give_back_are_forgotten_after_its_minute(
        fleet: Fleet, unique_id: str) -> None:
    """What ``unreleased`` remembers (each with its ``Connection``) is dropped once its minute
    has passed, at the next order too, not only at the next unanswered release."""
    from holdfast.worker.takeback import GIVE_BACK_MS

    writer, runner = runner_for(fleet, f"{unique_id}-forget", 7)
    now = [0]
    writer.mono = lambda: now[0]  # type: ignore[method-assign]
    writer.takeback.unreleased(runner)
    now[0] += GIVE_BACK_MS + 1
    assert not writer.takeback.ordered_back("another", 1)
    assert not writer.takeback._unreleased


class _NoAnswerOnce(LeaseStore):
    """DynamoDB does not answer the first take-back (and, with ``release_too``, the first
    release: after its take-back landed)."""

    release_too = False
    failed: set[str]

    def _once(self, call: str) -> None:
        if call not in self.failed:
            self.failed.add(call)
            raise StoreUnavailable(call, "no answer")

    def retake(self, lease: Lease, handled_seq: int | None = None
               ) -> tuple[Lease, bool] | None:
        self._once("retake")
        return super().retake(lease, handled_seq)

    def release(self, lease: Lease, handled_seq: int | None = None,
                **kwargs: Any) -> LossReason | None:
        if self.release_too:
            self._once("release")
        return super().release(lease, handled_seq, **kwargs)


@pytest.mark.parametrize("release_too", [False, True], ids=["take-back", "and-release"])
async def test_a_take_back_without_an_answer_gives_the_stream_back_with_its_checkpoint(
        fleet: Fleet, unique_id: str, release_too: bool) -> None:
    """The take-back gets no answer: the stream stops at once (unowned, it is claimable once
    the router's hold ends), and is given back with its checkpoint when DynamoDB answers
    (it was left with none: its next holder started at the upstream's head); also when the
    give-back's own release gets no answer after its take-back landed (it is ours then)."""
    conn = f"{unique_id}-over-retry-{release_too}"
    writer, runner = runner_for(fleet, conn, 7)
    writer.store = store = _NoAnswerOnce(fleet.ddb, fleet.table, lease_ms=BACKSTOP_MS,
                                         skew_ms=300)
    store.failed, store.release_too = set(), release_too
    written_over(fleet, conn)
    assert not await writer.takeback.retake(runner, "test")
    assert not runner.held.live
    await async_wait_until(lambda: ATTR.last_seq in (item := fleet.item(conn))
                           and ATTR.lease_owner not in item, 5, "given back")
    item = fleet.item(conn)
    assert ATTR.lease_owner not in item and item_attr(item, ATTR.last_seq) == 7
    assert writer.metrics.totals["HoldingsTakenBack"] == 1


class _SlowRetake(LeaseStore):
    """A take-back that takes a while."""

    def retake(self, lease: Lease, handled_seq: int | None = None
               ) -> tuple[Lease, bool] | None:
        time.sleep(0.3)
        return super().retake(lease, handled_seq)


async def test_a_stop_can_wait_for_its_give_backs(fleet: Fleet, unique_id: str) -> None:
    """``settled`` returns once the give-backs under way have released their streams: a
    stop's goodbye waits for it before the session ends and the threads go (a give-back
    cut off there left the checkpoint the write removed removed)."""
    conn = f"{unique_id}-over-settle"
    writer, runner = runner_for(fleet, conn, 7)
    writer.store = _SlowRetake(fleet.ddb, fleet.table, lease_ms=BACKSTOP_MS, skew_ms=300)
    written_over(fleet, conn)
    runner.lose("test")
    writer.takeback.give_back_soon(runner, "test")
    await writer.takeback.settled()
    assert item_attr(fleet.item(conn), ATTR.last_seq) == 7


async def test_a_draining_stream_whose_checkpoint_finds_it_written_over_is_given_back(
        fleet: Fleet, unique_id: str) -> None:
    """Written over while it drains (for a stop): its refused checkpoint does not take it
    back to go on, and it is not dropped either (its release would find no owner): given
    back with its checkpoint."""
    conn = f"{unique_id}-over-draining"
    writer, runner = runner_for(fleet, conn, 7)
    runner.drain_to(None, SHUTDOWN)
    written_over(fleet, conn)
    await writer.write()
    await async_wait_until(lambda: ATTR.last_seq in (item := fleet.item(conn))
                           and ATTR.lease_owner not in item, 5, "given back")
    item = fleet.item(conn)
    assert ATTR.lease_owner not in item and item_attr(item, ATTR.last_seq) == 7


async def test_a_take_back_writes_the_live_checkpoint(fleet: Fleet, unique_id: str) -> None:
    """The take-back writes what the holder handled, not the last checkpoint it knows was
    stored: a checkpoint whose answer was lost is newer than that one, and the stored
    checkpoint went back (seen in a soak)."""
    conn = f"{unique_id}-over-live"
    writer, runner = runner_for(fleet, conn, 7)
    assert runner.held.lease.last_seq is None  # as the holder knows it
    written_over(fleet, conn)
    assert await writer.takeback.retake(runner, "test")
    assert item_attr(fleet.item(conn), ATTR.last_seq) == 7


async def test_a_checkpoint_overtaken_by_our_take_back_is_not_a_regression(
        fleet: Fleet, unique_id: str) -> None:
    """A checkpoint sent before the take-back and refused after it (the stored one, ours,
    is ahead of it): the stream goes on (it was stopped as if someone had moved it)."""
    conn = f"{unique_id}-over-race"
    writer, runner = runner_for(fleet, conn, 7)
    written_over(fleet, conn)
    assert await writer.takeback.retake(runner, "test")
    current = LeaseItem.from_ddb(fleet.item(conn))
    writer.on_lost(runner, LeaseLost(conn, LossReason.REGRESSION, current), "checkpoint")
    assert runner.held.live and not runner.held.stopping
