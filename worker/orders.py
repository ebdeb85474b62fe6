"""The worker's order inbox: an SQS queue of its session's own, long-polled for orders.

The router sends a stop order here the moment it sees ``desired_state = STOPPED`` on a stream we
hold, so a stop takes one stream record and one long-poll wake-up (tens of milliseconds), not a
heartbeat period. The same order also waits in the session item, read with the next heartbeat:
if this queue is gone, throttled or a message is lost, the stop is late, never lost
(``holdfast.core.orders``).

- ``open(owner)``: create the queue of a new incarnation (idempotent) and start reading it at
  once (the long poll of the old one is not waited for); the previous incarnation's queue is
  deleted. Messages live 60 s: an order that old has been carried out through the session item
  anyway.
- Also here: rebalancing directives and the drain flag (``worker.balancing``), and handoff
  nudges, streams another worker released to us by name (claimed at once), and the
  make-before-break steps; many at once come as one bundle (``holdfast.core.bundles``).
- ``run()``: long-poll until cancelled. A message for another owner (a reused name cannot, but
  a forged one could) or one this version does not understand is deleted with a log line; a
  failed receive is retried with jittered back-off, and a queue that vanished (the sweeper
  collects queues without a live session) is created again.
- ``close()``: delete the queue at a graceful stop (after the session has ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.bundles import unbundle
from holdfast.core.directives import Directive, parse_inbox_body
from holdfast.core.handoff import HandoffStep
from holdfast.core.nudge import Nudge
from holdfast.core.orders import Order, is_missing_queue, order_queue_name
from holdfast.worker.iothreads import in_daemon_thread
from holdfast.worker.logs import WORKER_LOGGER

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["QUEUE_ATTRIBUTES", "OrderInbox"]

logger = Logger(service=WORKER_LOGGER, child=True)

# 60 s is SQS's shortest retention; server-side encryption as for every queue of the stack.
QUEUE_ATTRIBUTES = {"MessageRetentionPeriod": "60", "SqsManagedSseEnabled": "true",
                    "VisibilityTimeout": "30"}
_MAX_BACKOFF_S = 5.0


@dataclass
class OrderInbox:
    """The order queue of the current incarnation; ``stop_stream`` carries out a stop."""

    sqs: SQSClient
    prefix: str
    stop_stream: Callable[[Order], bool]  # carries out an order (stop, release)
    wait_s: int = 20
    # Rebalancing news (a target, or the drain flag) sent to this queue by the decider or
    # ``holdfast drain``; None: such messages are ignored like unknown ones.
    directive: Callable[[Directive | bool], None] | None = None
    # A stream released to us by name (a handoff, ``holdfast.core.nudge.REASON_HANDOFF``):
    # claimed at once; None: ignored (the shared queue's nudge comes when the hold ends).
    handoff: Callable[[Nudge], None] | None = None
    # A make-before-break message (``holdfast.core.handoff``); None: ignored.
    step: Callable[[HandoffStep], None] | None = None
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    owner: str | None = None
    url: str | None = None
    received: int = 0
    _acks: set[asyncio.Task[None]] = field(default_factory=set)
    # Set when the queue being read is replaced (a new incarnation's) or closed: the long poll
    # of the old one is left to end in its thread (see ``_receive``).
    _replaced: asyncio.Event = field(default_factory=asyncio.Event)
    # The creation in flight and its owner: ``open`` and ``run`` (which sees no URL while
    # ``open`` waits on SQS) share one CreateQueue instead of racing two.
    _creating: tuple[str, asyncio.Future[bool]] | None = None

    async def _io(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        # A daemon thread of its own per call: a 20 s long poll must neither hold up a claim
        # or heartbeat thread nor delay the process's exit after a graceful stop.
        return await in_daemon_thread(functools.partial(fn, **kwargs))

    async def open(self, owner: str) -> bool:
        """Create ``owner``'s queue and read it from now on; False if SQS said no (logged)."""
        old, self.owner, self.url = self.url, owner, None
        if old is not None:
            await self._delete(old)
        return await self._create(owner)

    async def _create(self, owner: str) -> bool:
        """Create ``owner``'s queue, or wait for the creation already in flight for it."""
        pending = self._creating
        if pending is None or pending[0] != owner or pending[1].done():
            pending = (owner, asyncio.ensure_future(self._create_now(owner)))
            self._creating = pending
        # Shielded: a cancelled reader must not cancel the creation the other one awaits.
        return await asyncio.shield(pending[1])

    async def _create_now(self, owner: str) -> bool:
        name = order_queue_name(self.prefix, owner)
        try:
            resp = await self._io(self.sqs.create_queue, QueueName=name,
                                  Attributes=QUEUE_ATTRIBUTES)
        except (BotoCoreError, ClientError) as exc:
            logger.warning("cannot create the order queue: stops wait for the heartbeat",
                           queue=name, error=str(exc)[:300])
            return False
        if owner == self.owner:  # not replaced by a newer incarnation meanwhile
            self.url = resp["QueueUrl"]
            self._replaced.set()
            logger.info("order queue ready", queue=name, owner=owner)
        return True

    async def close(self) -> None:
        """Delete the current queue (best effort: the sweeper collects what is left)."""
        url, self.url, self.owner = self.url, None, None
        self._replaced.set()
        if url is not None:
            await self._delete(url)

    async def _delete(self, url: str) -> None:
        with contextlib.suppress(BotoCoreError, ClientError):
            await self._io(self.sqs.delete_queue, QueueUrl=url)

    async def run(self) -> None:
        """Read orders until cancelled."""
        failures = 0
        while True:
            url, owner = self.url, self.owner
            if owner is None:  # no session yet (or between incarnations)
                await self.sleep(0.2)
                continue
            if url is None:  # creating it failed, or it vanished: try again
                if not await self._create(owner):
                    failures += 1
                    await self.sleep(self._backoff_s(failures))
                continue
            try:
                resp = await self._receive(url)
            except (BotoCoreError, ClientError) as exc:
                failures += 1
                if is_missing_queue(exc) and url == self.url:
                    self.url = None  # created again on the next round
                logger.warning("order queue receive failed", error=str(exc)[:300],
                               failures=failures)
                await self.sleep(self._backoff_s(failures))
                continue
            failures = 0
            if resp is None:
                continue  # another queue now: read that one
            messages = resp.get("Messages", [])
            if messages:
                self._act_on(messages, owner)
                # Deleted beside the next receive, not before it: a handoff's next message
                # (READY, TAKE) often lands in the same instant, and waiting for this call
                # put it in every handoff's gap.
                ack = asyncio.ensure_future(self._ack(url, messages))
                self._acks.add(ack)
                ack.add_done_callback(self._acks.discard)

    async def _receive(self, url: str) -> dict[str, Any] | None:
        """One long poll of ``url``; None if the queue was replaced or closed meanwhile. The
        old queue's poll is not waited for: a deletion does not end a long poll on moto, and a
        worker that had fenced its session read its new incarnation's queue only when the old
        one's 20 s poll ended, refusing every handoff meanwhile (the soak's successor that
        answered no warm-up in 15 s and ended its run out of balance)."""
        self._replaced.clear()
        if url != self.url:
            return None
        # The thread's future itself (not a task around it): cancelled at once below.
        poll = in_daemon_thread(functools.partial(
            self.sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10,
            WaitTimeSeconds=self.wait_s))
        replaced: asyncio.Future[Any] = asyncio.ensure_future(self._replaced.wait())
        try:
            await asyncio.wait([poll, replaced], return_when=asyncio.FIRST_COMPLETED)
        finally:
            replaced.cancel()
            if not poll.done():
                # The old queue's poll (or the stop's): what it brings is not acted on; its
                # thread ends with the poll, and its answer is dropped.
                poll.cancel()
        return None if poll.cancelled() else dict(poll.result())

    def _act_on(self, messages: list[Any], owner: str) -> None:
        # One message's bug (or one bundled in it) costs that message, never the inbox: its
        # loop, and the messages after it in the receive, were lost with it.
        for msg in messages:
            body = str(msg.get("Body", ""))
            try:
                bodies = unbundle(body, owner)
            except Exception:
                logger.exception("order message not read", body=body[:200])
                continue
            for one in bodies:
                self.received += 1
                try:
                    self._act_on_one(one, owner)
                except Exception:
                    logger.exception("order message not acted on", body=one[:200])

    def _act_on_one(self, body: str, owner: str) -> None:
        said = parse_inbox_body(body, owner)
        if isinstance(said, Order):
            acted = self.stop_stream(said)
            logger.info("order", verb=said.verb, conn_id=said.conn_id, epoch=said.epoch,
                        held=acted, via="queue")
        elif isinstance(said, Nudge):
            if self.handoff is not None:
                self.handoff(said)
        elif isinstance(said, HandoffStep):
            if self.step is not None:
                self.step(said)
        elif said is not None and self.directive is not None:
            self.directive(said)
        else:
            logger.warning("order message ignored (foreign or unknown)", body=body[:200])

    async def _ack(self, url: str, messages: list[Any]) -> None:
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                   for i, m in enumerate(messages) if "ReceiptHandle" in m]
        try:
            await self._io(self.sqs.delete_message_batch, QueueUrl=url, Entries=entries)
        except (BotoCoreError, ClientError) as exc:
            # Redelivered in 30 s at most: a repeated stop of a stream no longer held is a no-op.
            logger.warning("cannot delete order messages", error=str(exc)[:300])

    def _backoff_s(self, failures: int) -> float:
        return float(min(_MAX_BACKOFF_S, 0.2 * 2 ** min(failures, 6)) * (0.5 + self.rand()))
