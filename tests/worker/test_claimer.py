"""Nudge handling against moto SQS: what is deleted, returned later, or handed on at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import Any

import pytest

from holdfast.core.nudge import HOPS
from holdfast.localaws import LocalAws
from holdfast.worker.claimer import MAX_HOPS, Claimer
from holdfast.worker.claims import Claim, Later
from holdfast.worker.iothreads import in_daemon_thread
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.settle import hand_on
from tests.conftest import client_for
from tests.worker.conftest import async_wait_until


async def test_in_daemon_thread_returns_and_raises() -> None:
    """Results and exceptions of the blocking call reach the awaiting coroutine."""
    assert await in_daemon_thread(lambda: 41 + 1) == 42
    with pytest.raises(ZeroDivisionError):
        await in_daemon_thread(lambda: 1 / 0)


@pytest.fixture
def queue(moto_local: LocalAws, unique_id: str) -> Any:
    sqs = client_for(moto_local, "sqs")
    url = sqs.create_queue(QueueName=f"claimer-{unique_id}")["QueueUrl"]
    yield sqs, url
    sqs.delete_queue(QueueUrl=url)


def send(sqs: Any, url: str, *conn_ids: str) -> None:
    for c in conn_ids:
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"conn_id": c}))


def visible(sqs: Any, url: str) -> list[str]:
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                               VisibilityTimeout=0)
    return sorted(json.loads(m["Body"])["conn_id"] for m in resp.get("Messages", []))


async def test_outcomes_decide_each_message(queue: Any) -> None:
    """CLAIMED/CONFLICT delete, NO_CAPACITY returns at once, UNAVAILABLE returns after a delay."""
    sqs, url = queue
    outcomes = {"a": Claim.CLAIMED, "b": Claim.CONFLICT, "c": Claim.NO_CAPACITY,
                "d": Claim.UNAVAILABLE}

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        return outcomes[conn_id]

    claimer = Claimer(sqs, url, claim, lambda: 10, WorkerMetrics(), poll_s=1, retry_delay_s=2)
    send(sqs, url, *outcomes)
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    await claimer.handle([dict(m) for m in resp["Messages"]])
    await asyncio.gather(*claimer._settling)
    assert visible(sqs, url) == ["c"]
    await asyncio.sleep(2.3)
    assert visible(sqs, url) == ["c", "d"]


async def test_a_poison_nudge_is_logged_without_url_secrets(
        queue: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A nudge that cannot be parsed is deleted and logged with its body, any WebSocket URL in
    it redacted (a nudge may carry the stream's URL)."""
    sqs, url = queue

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        raise AssertionError("a poison nudge is not claimed")

    claimer = Claimer(sqs, url, claim, lambda: 10, WorkerMetrics(), poll_s=1, retry_delay_s=2)
    sqs.send_message(QueueUrl=url, MessageBody='{"conn_id": "c1", "url": '
                                                 '"wss://h.example.com/feed?token=TOKEN-SECRET"')
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    await claimer.handle([dict(m) for m in resp["Messages"]])
    await asyncio.gather(*claimer._settling)
    logged = [vars(r) for r in caplog.records if r.getMessage() == "poison nudge deleted"]
    assert len(logged) == 1 and "wss://h.example.com/<" in logged[0]["body"]
    assert "TOKEN-SECRET" not in caplog.text and visible(sqs, url) == []


async def test_a_claim_that_raises_costs_only_its_own_message(queue: Any) -> None:
    """A bug in one claim (it raises): that nudge comes back later, the others of the batch
    are settled as they came out (one raising used to leave the whole batch unsettled)."""
    sqs, url = queue
    outcomes = {"a": Claim.CLAIMED, "c": Claim.NO_CAPACITY}

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        if conn_id == "boom":
            raise RuntimeError("a bug")
        return outcomes[conn_id]

    claimer = Claimer(sqs, url, claim, lambda: 10, WorkerMetrics(), poll_s=1, retry_delay_s=2)
    send(sqs, url, "a", "boom", "c")
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    while len(resp["Messages"]) < 3:
        more = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        resp["Messages"] += more.get("Messages", [])
    await claimer.handle([dict(m) for m in resp["Messages"]])
    await asyncio.gather(*claimer._settling)
    assert visible(sqs, url) == ["c"]  # "a" deleted, "boom" back after its delay


async def test_asks_only_for_free_capacity(queue: Any) -> None:
    """With 3 free slots the claimer takes at most 3 nudges and leaves the rest queued."""
    sqs, url = queue
    seen: list[str] = []
    free = [3]

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        seen.append(conn_id)
        free[0] -= 1
        return Claim.CLAIMED

    send(sqs, url, *(f"s{i}" for i in range(8)))
    claimer = Claimer(sqs, url, claim, lambda: free[0], WorkerMetrics(), poll_s=1, idle_s=0.05)
    task = asyncio.create_task(claimer.run())
    await async_wait_until(lambda: len(seen) >= 3, 5, "three claims")
    await asyncio.sleep(1.0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await claimer.finish_polls(2)
    assert len(seen) == 3
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert int(attrs["Attributes"]["ApproximateNumberOfMessages"]) == 5


async def test_later_outcome_returns_the_nudge_after_its_delay(queue: Any) -> None:
    """A Later(n) outcome hides the nudge for n seconds instead of deleting it."""
    sqs, url = queue

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Later:
        return Later(2)

    claimer = Claimer(sqs, url, claim, lambda: 10, WorkerMetrics(), poll_s=1)
    send(sqs, url, "x")
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    await claimer.handle([dict(m) for m in resp["Messages"]])
    await asyncio.gather(*claimer._settling)
    assert visible(sqs, url) == []
    await asyncio.sleep(2.3)
    assert visible(sqs, url) == ["x"]


async def test_stopping_worker_hands_caught_nudges_on(queue: Any) -> None:
    """A nudge caught by a stopped worker's last poll is at once receivable by others, once."""
    sqs, url = queue

    async def never(conn_id: str, source: str) -> Claim:
        raise AssertionError("a stopping worker must not claim")

    stopping = Claimer(sqs, url, never, lambda: 10, WorkerMetrics(), poll_s=2)
    stopping._abandon.set()  # the worker stopped while this poll was in flight
    send(sqs, url, "handed-on")
    assert await in_daemon_thread(lambda: stopping._receive(1, [], stopping._abandon)) == []
    assert visible(sqs, url) == ["handed-on"]


async def test_a_refused_nudge_is_handed_on_with_its_hops_then_waits(queue: Any) -> None:
    """A stream we shed is handed on with hops + 1 (each one counted); at MAX_HOPS it waits a
    second instead."""
    sqs, url = queue

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        return Claim.REFUSED

    metrics = WorkerMetrics()
    claimer = Claimer(sqs, url, claim, lambda: 10, metrics, poll_s=1)
    send(sqs, url, "r")
    for hop in range(1, MAX_HOPS + 1):
        resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        (message,) = resp["Messages"]
        await claimer.handle([dict(message)])
        await asyncio.gather(*claimer._settling)
        body = json.loads(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1,
                                              VisibilityTimeout=0)["Messages"][0]["Body"])
        assert body["conn_id"] == "r" and body[HOPS] == hop
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    (message,) = resp["Messages"]
    await claimer.handle([dict(message)])  # the last hop: back in a second, not handed on
    await asyncio.gather(*claimer._settling)
    assert metrics.totals["NudgesHandedOn"] == MAX_HOPS
    assert visible(sqs, url) == []
    await asyncio.sleep(1.3)
    assert visible(sqs, url) == ["r"]


async def test_the_next_batch_is_polled_while_one_is_being_claimed(queue: Any) -> None:
    """One poller, claims that wait: the second batch is received and claimed before the first
    batch's claims finish, and free capacity counts the claims in flight."""
    sqs, url = queue
    release = asyncio.Event()
    started: list[str] = []

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        started.append(conn_id)
        await release.wait()
        return Claim.CLAIMED

    send(sqs, url, *(f"s{i}" for i in range(15)))
    claimer = Claimer(sqs, url, claim, lambda: 12, WorkerMetrics(), poll_s=1, pollers=1,
                      idle_s=0.05)
    task = asyncio.create_task(claimer.run())
    try:
        await async_wait_until(lambda: len(started) >= 12, 5, "two batches claimed at once")
        await asyncio.sleep(0.3)
        assert len(started) == 12  # capacity 12: the rest waits for the claims in flight
    finally:
        release.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_stop_cancels_the_polling_not_the_claims_in_flight(queue: Any) -> None:
    """Cancelling ``run`` (the worker's stop) lets a batch being claimed finish: its claimed
    nudge is deleted, the one answered "no capacity" (stopping) is handed on at once."""
    sqs, url = queue
    release, stopping = asyncio.Event(), [False]

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        if conn_id == "landing":
            await release.wait()  # its acquire is on its way
            return Claim.CLAIMED
        await async_wait_until(lambda: stopping[0], 5, "the stop")
        return Claim.NO_CAPACITY

    claimer = Claimer(sqs, url, claim, lambda: 10, WorkerMetrics(), poll_s=1)
    send(sqs, url, "landing", "next")
    task = asyncio.create_task(claimer.run())
    await async_wait_until(lambda: claimer._handling, 5, "a batch being claimed")
    await asyncio.sleep(0.3)  # both in one batch, or the second in a second one
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    stopping[0] = True
    release.set()
    assert await claimer.finish_polls(5) == 0
    assert not claimer._handling
    await asyncio.gather(*claimer._settling)
    assert visible(sqs, url) == ["next"]


class HeldReceive:
    """The moto client, whose ReceiveMessage waits for ``go`` before it is sent."""

    def __init__(self, sqs: Any) -> None:
        self._sqs, self.entered, self.go = sqs, threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def receive_message(self, **kwargs: Any) -> Any:
        self.entered.set()
        self.go.wait(5)
        return self._sqs.receive_message(**kwargs)


async def test_nudges_received_in_the_instant_of_a_stop_are_handed_on(queue: Any) -> None:
    """A receive whose answer reaches the loop just as the polling is cancelled: its nudges
    are handed on at once, not hidden for the visibility timeout (5 s)."""
    sqs, url = queue
    held, claimed = HeldReceive(sqs), []

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        claimed.append(conn_id)
        return Claim.CLAIMED

    claimer = Claimer(held, url, claim, lambda: 10, WorkerMetrics(), poll_s=1, pollers=1)
    task = asyncio.create_task(claimer.run())
    await async_wait_until(held.entered.is_set, 5, "a receive in flight")
    send(sqs, url, "caught")
    held.go.set()
    # The loop is blocked (no await) until the thread has the answer: it has nowhere to go.
    deadline = time.monotonic() + 5
    while claimer._polls_in_flight and time.monotonic() < deadline:
        time.sleep(0.005)  # noqa: ASYNC251 (the loop must not run meanwhile)
    time.sleep(0.05)  # noqa: ASYNC251 (likewise: the answer reaches the loop first)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert await claimer.finish_polls(5) == 0
    assert visible(sqs, url) == ["caught"] and claimed == []


async def test_a_poll_of_a_crashed_run_still_in_flight_hands_its_nudges_on(
        queue: Any) -> None:
    """The claimer restarted (after a crash) while a poll of its last run is still in flight:
    that poll's nudges are handed on when it returns, not hidden for the visibility timeout."""
    sqs, url = queue
    held, room = HeldReceive(sqs), [10]

    async def claim(conn_id: str, source: str, *, ws_url: str | None = None) -> Claim:
        return Claim.CLAIMED

    claimer = Claimer(held, url, claim, lambda: room[0], WorkerMetrics(), poll_s=1, pollers=1,
                      idle_s=0.05)
    first = asyncio.create_task(claimer.run())
    await async_wait_until(held.entered.is_set, 5, "a receive in flight")
    first.cancel()  # what a sibling poller's crash does to it
    with contextlib.suppress(asyncio.CancelledError):
        await first
    room[0] = 0  # the restarted run does not poll: only the old receive can get the nudge
    restarted = asyncio.create_task(claimer.run())
    await asyncio.sleep(0.1)
    send(sqs, url, "in-flight")
    held.go.set()
    await async_wait_until(lambda: claimer._polls_in_flight == 0, 5, "the old poll's end")
    restarted.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await restarted
    assert visible(sqs, url) == ["in-flight"]


class FailsEntriesAfterTheFirst:
    """The moto client, whose SendMessageBatch sends only its first entry and reports the
    others failed, as SQS may (an InternalError per entry)."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        resp = self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=Entries[:1])
        return {"Successful": resp.get("Successful", []), "Failed": [
            {"Id": e["Id"], "SenderFault": False, "Code": "InternalError",
             "Message": "try again"} for e in Entries[1:]]}


async def test_a_nudge_whose_copy_failed_is_kept_and_shown_again(queue: Any) -> None:
    """Handing on, an entry SQS did not send keeps its original, visible again at once; only
    the ones copied are deleted (both were deleted, and the unsent nudge was lost)."""
    sqs, url = queue
    send(sqs, url, "a", "b")
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                               VisibilityTimeout=30)
    messages = sorted((dict(m) for m in resp["Messages"]), key=lambda m: m["Body"])
    assert len(messages) == 2
    hand_on(FailsEntriesAfterTheFirst(sqs), url, messages)
    assert visible(sqs, url) == ["a", "b"]  # "a" as its copy, "b" as its original again
