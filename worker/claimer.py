"""Claims: long-poll the nudge queue for as many messages as there is free capacity, and sweep.

Nudges are ``holdfast.core.nudge``'s (one parser, strict only about ``conn_id``). What
happens to each message:

- claimed, or a definitive "no" (HELD, STOPPED, DELETED, INVALID, already ours): deleted;
  whoever holds the stream now does not need the nudge, and the router or sweep nudges again
  when it becomes claimable;
- in back-off that ends within 15 minutes: shown again when it ends (later ones: deleted, the
  sweep finds the stream then);
- DynamoDB unavailable (throttled, down): made visible again after a jittered delay that doubles
  with each receive (``worker.backoff.claim_retry_s``), so a throttled fleet's claims neither
  spin nor all come back at once when it recovers (after ``DLQ_MAX_RECEIVE_COUNT`` receives
  the queue parks it in the dead-letter queue);
- no capacity any more, shutting down, or our release of it still being answered: handed on
  at once to another worker;
- poison (not JSON, no valid ``conn_id``): deleted with a log line.

The reconcile sweep (``worker.reconciler``) is the safety net for a router that is down. What a
claim is asked and answers (its sources, ``Claim``, ``Later``, ``ClaimFn``) is ``worker.claims``.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger

from holdfast.core import names, tracing
from holdfast.core.aws import call
from holdfast.core.exceptions import HoldfastError
from holdfast.core.nudge import (
    REASON_INSERTED,
    REASON_MOVED,
    TRACE_ATTRIBUTE,
    parse_nudge,
    traceparent_of,
    url_if_fresh,
)
from holdfast.core.redact import redact_urls_in
from holdfast.core.store import wall_clock_ms
from holdfast.worker.backoff import claim_retry_s, jittered
from holdfast.worker.claims import SOURCE_INSERTED, SOURCE_MOVED, Claim, ClaimFn, Later
from holdfast.worker.iothreads import in_daemon_thread, logs_failure, on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.settle import hand_on, hops, receives, sent_ms, settle

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["MAX_HOPS", "Claimer"]

logger = Logger(service=WORKER_LOGGER, child=True)
T = TypeVar("T")
# Hand-ons of a refused nudge before it waits a second (a shed stream) or is simply claimed (a
# move at a worker at its share): each hop lands on a random waiting poll, so 10 hops make
# "only ever the wrong workers" a one-in-a-thousand case when half the pollers would refuse.
MAX_HOPS = 10


@dataclass
class Claimer:
    """Long-polls the nudge queue while there is capacity, and acts on each message."""

    sqs: SQSClient
    queue_url: str
    claim: ClaimFn
    free_capacity: Callable[[], int]
    metrics: WorkerMetrics
    poll_s: int = 20
    retry_delay_s: int = 2  # the first redelivery after "unavailable"; doubles per receive
    idle_s: float = 0.5
    pollers: int = 2
    # Messages a dying worker received in a poll it could not finish come back this soon.
    visibility_s: int = 5
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    wall: Callable[[], int] = wall_clock_ms  # epoch ms, against a nudge's SentTimestamp
    _abandon: threading.Event = field(default_factory=threading.Event)
    _reserved: int = 0  # slots asked for by polls in flight
    _settling: set[asyncio.Task[None]] = field(default_factory=set)
    _handling: set[asyncio.Task[None]] = field(default_factory=set)  # batches being claimed
    _polls_in_flight: int = 0  # receive calls still running in their threads
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def run(self) -> None:
        """Poll and claim until cancelled; a message received after cancellation is put back."""
        # This run's own: a restart after a crash polls for real again, while a poll of the
        # run before, still in flight, keeps the set one it was given and hands its nudges on.
        abandon = self._abandon = threading.Event()
        try:
            # A second poller claims the next batch while the first one's claims are written:
            # a scale-in's burst of released streams is taken up twice as fast.
            async with asyncio.TaskGroup() as tg:
                for _ in range(self.pollers):
                    tg.create_task(self._poll_loop(abandon, concurrent=True))
        finally:
            abandon.set()

    async def _poll_loop(self, abandon: threading.Event, *, concurrent: bool = False) -> None:
        while True:
            want = min(10, self.free_capacity() - self._reserved)
            if want <= 0:
                await self.sleep(self.idle_s)  # full: leave the queue to other workers
                continue
            self._reserved += want
            got: list[dict[str, Any]] = []  # the receive's messages, once its thread has them
            try:
                messages = await in_daemon_thread(
                    functools.partial(self._receive, want, got, abandon))
            except asyncio.CancelledError:
                self._abandon_polls(got, abandon)
                raise
            except HoldfastError as exc:
                logger.warning("cannot poll the nudge queue", error=str(exc)[:300])
                await self.sleep(jittered(2.0))
                continue
            finally:
                self._reserved -= want
            if not messages:
                continue
            if not concurrent:
                await self.handle(messages)
                continue
            # Poll again while these are claimed: a crash's or a burst's nudges arrive faster
            # than one batch's conditional writes and connects (150 released streams took 4 s
            # to claim with each poller waiting on its batch). Their slots stay reserved.
            # Not in the pollers' task group: a stop cancels the polling, not the claims in
            # flight; those end (handed straight back, ``Holdings._start``) and their nudges
            # are settled, the ones not yet claimed handed on at once (no capacity).
            self._reserved += len(messages)
            task = asyncio.get_running_loop().create_task(self._handle_reserved(messages))
            self._handling.add(task)
            task.add_done_callback(self._handling.discard)
            # A bug: its messages come back after their visibility timeout.
            task.add_done_callback(logs_failure("handling a batch of nudges"))

    async def _handle_reserved(self, messages: list[dict[str, Any]]) -> None:
        try:
            await self.handle(messages)
        finally:
            self._reserved -= len(messages)

    def _abandon_polls(self, got: list[dict[str, Any]], abandon: threading.Event) -> None:
        """Our poll was cancelled (the worker's stop, a sibling poller's crash): every receive
        of this run from now on hands its messages on, and this one's, if its thread returned
        them in the very instant of the cancellation (nowhere to go), are handed on too."""
        with self._lock:
            abandon.set()
            late = list(got)
            self._polls_in_flight += bool(late)  # ``finish_polls`` waits for it as for a poll
        if late:
            in_daemon_thread(functools.partial(self._hand_on, late))

    def _hand_on(self, messages: list[dict[str, Any]]) -> None:
        try:
            settle(self.sqs, self.queue_url, [], [], hand=messages)  # a failure is logged
        finally:
            with self._lock:
                self._polls_in_flight -= 1

    def _receive(self, n: int, got: list[dict[str, Any]],
                 abandon: threading.Event) -> list[dict[str, Any]]:
        with self._lock:
            self._polls_in_flight += 1
        # The sender's trace context is only asked for when this worker traces.
        extra: dict[str, Any] = (
            {"MessageAttributeNames": [TRACE_ATTRIBUTE]} if tracing.enabled() else {})
        try:
            resp = call("ReceiveMessage", self.sqs.receive_message, QueueUrl=self.queue_url,
                        MaxNumberOfMessages=n, WaitTimeSeconds=self.poll_s,
                        VisibilityTimeout=self.visibility_s,
                        AttributeNames=["ApproximateReceiveCount", "SentTimestamp"], **extra)
            messages = [dict(m) for m in resp.get("Messages", [])]
            with self._lock:  # against ``_abandon_polls``: exactly one of us hands them on
                abandoned = abandon.is_set()
                if not abandoned:
                    got.extend(messages)
            if messages and abandoned:
                # The worker stopped while this poll was in flight: hand them on at once.
                hand_on(self.sqs, self.queue_url, messages)
                return []
            return messages
        finally:
            with self._lock:
                self._polls_in_flight -= 1

    async def finish_polls(self, timeout_s: float) -> int:
        """After a stop, wait (bounded) for polls in flight to hand back what they receive,
        and for the claims in flight to end (their nudges settled).

        A released stream's nudge may land in this worker's own last poll; waiting here lets
        that poll return it at once instead of after ``visibility_s``. Returns polls left.
        """
        self._abandon.set()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (self._polls_in_flight > 0 or self._handling) and (
                asyncio.get_running_loop().time() < deadline):
            await self.sleep(0.02)
        return self._polls_in_flight

    async def handle(self, messages: list[dict[str, Any]]) -> None:
        """Claim what each message names, then delete or return the messages in batches."""
        outcomes = await asyncio.gather(*(self._one(m) for m in messages),
                                        return_exceptions=True)
        delete: list[dict[str, Any]] = []
        again: list[tuple[dict[str, Any], int]] = []
        # Full, stopping, or shut by the rebalancing gate: a fresh copy wakes a long poll
        # elsewhere at once, where visibility 0 may not (see ``_hand_on``).
        hand: list[dict[str, Any]] = []
        for message, result in zip(messages, outcomes, strict=True):
            outcome = self._settled(message, result)
            if isinstance(outcome, Later):
                again.append((message, outcome.seconds))
            elif outcome is Claim.UNAVAILABLE:
                again.append((message, claim_retry_s(
                    receives(message), self.retry_delay_s, 2.0 * self.retry_delay_s,
                    self.rand)))
            elif outcome is Claim.NO_CAPACITY:
                hand.append(message)
            elif outcome is Claim.REFUSED:
                # Handed on with a hop count: if we are the only worker polling, our own copy
                # comes back to us, so after a few hops it waits a second instead.
                if hops(message) < MAX_HOPS:
                    hand.append(message)
                else:
                    again.append((message, 1))
            else:  # claimed, a definitive no, or poison
                delete.append(message)
        if hand:
            self.metrics.incr(names.METRIC_NUDGES_HANDED_ON, len(hand))
        # Settle in the background: the next poll need not wait for the deletes.
        task = asyncio.create_task(on_io_threads(
            settle, self.sqs, self.queue_url, delete, again, hand))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    @staticmethod
    def _settled(message: dict[str, Any], result: Claim | Later | BaseException | None,
                 ) -> Claim | Later | None:
        """A message's outcome; a claim that raised (a bug) is shown again later, and costs
        only its own message: the others of the batch are settled as they came out."""
        if not isinstance(result, BaseException):
            return result
        if not isinstance(result, Exception | asyncio.CancelledError):
            raise result
        logger.error("a nudge's claim failed; shown again later",
                     error=f"{type(result).__name__}: {result}"[:300],
                     message_id=message.get("MessageId"))
        return Claim.UNAVAILABLE

    async def _one(self, message: dict[str, Any]) -> Claim | Later | None:
        body = message.get("Body", "")
        try:
            nudge = parse_nudge(body if isinstance(body, str) else "")
        except ValueError as exc:
            self.metrics.incr(names.METRIC_POISON_MESSAGES)
            logger.warning("poison nudge deleted", error=str(exc)[:200],
                           message_id=message.get("MessageId"),
                           body=redact_urls_in(str(body)[:1000])[:200])
            return None
        # Each message is its own task (gather): the claim span's parent is this nudge's.
        # A moved stream's nudge may be handed on by a worker above its share (a few hops).
        source = SOURCE_MOVED if nudge.reason == REASON_MOVED and hops(
            message) < MAX_HOPS else SOURCE_INSERTED if nudge.reason == REASON_INSERTED else (
            "nudge")
        with tracing.attached(traceparent_of(message)):
            return await self.claim(nudge.conn_id, source, ws_url=url_if_fresh(
                nudge, sent_ms(message), receives(message), self.wall())
                if source == SOURCE_INSERTED else None)
