"""Messages to other workers' order queues, sent in batches per recipient.

A worker writes to another worker's order queue for handoffs only: the make-before-break steps
(``holdfast.core.handoff``) and, after a release that named its successor, a handoff nudge
straight to that successor (the router sends one too, a stream record later; the second is a
no-op). A stop or a shed hands over tens of streams in one turn of the event loop: one SQS call
per message queued them behind each other, and the queueing was most of each handoff's gap. So
``post`` only queues; a flush in the next turn sends everything queued by then for one
recipient as one bundle (``holdfast.core.bundles``: one SQS message, one receive), the
recipients side by side, two attempts. Flushes do not wait for each other, up to
``FLUSHES_IN_FLIGHT``: a TAKE posted while the previous turn's send was out waited for it
(43 ms p50 of each make-before-break gap in the bench's deploy, a third of its SQS hop);
beyond that bound what is posted gathers into the next flush, so a stop's hundreds of steps
still go in few calls. Messages to one recipient may arrive in any order (SQS standard
queues promise none): each handoff step answers the one before it. A message that cannot be
sent is logged: each handoff step has its own timeout on both sides, and a handoff nudge has
the router's and the shared queue's behind it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

from aws_lambda_powertools import Logger

from holdfast.core.bundles import send_bundled
from holdfast.core.orders import order_queue_url
from holdfast.core.sending import Outgoing
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["FLUSHES_IN_FLIGHT", "Outbox"]

logger = Logger(service=WORKER_LOGGER, child=True)
# Sends out at once; the io threads (``worker.iothreads``) also carry the transfers they
# announce, so a stop's sends must not take them all.
FLUSHES_IN_FLIGHT: Final = 4


class Outbox:
    """Batches messages for other workers' order queues (see the module)."""

    def __init__(self, *, sqs: SQSClient, queue_url: str, prefix: str) -> None:
        self.sqs, self.queue_url, self.prefix = sqs, queue_url, prefix
        self._pending: dict[str, list[Outgoing]] = {}
        self._flushes: set[asyncio.Task[None]] = set()
        self._scheduled = False  # a flush waits for this turn's end to take what is pending
        self.calls = 0  # SendMessageBatch calls made

    def post(self, peer: str, message: Outgoing) -> None:
        """Queue ``message`` for ``peer``'s order queue; sent in this turn's batch (or, with
        ``FLUSHES_IN_FLIGHT`` sends out, as soon as one of them ends)."""
        self._pending.setdefault(peer, []).append(message)
        self._schedule()

    def _schedule(self) -> None:
        if self._scheduled or not self._pending or len(self._flushes) >= FLUSHES_IN_FLIGHT:
            return
        self._scheduled = True
        flush = asyncio.ensure_future(self._flush())
        self._flushes.add(flush)
        flush.add_done_callback(self._flushed)

    def _flushed(self, flush: asyncio.Task[None]) -> None:
        self._flushes.discard(flush)
        if not flush.cancelled():
            self._schedule()  # what gathered while every flush was out

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # let this turn's other handoffs post theirs too
        finally:
            self._scheduled = False
        batch, self._pending = self._pending, {}
        await asyncio.gather(*(self._send(p, m) for p, m in batch.items()))

    async def _send(self, peer: str, messages: list[Outgoing]) -> None:
        try:
            url = order_queue_url(self.queue_url, self.prefix, peer)
            report = await on_io_threads(send_bundled, self.sqs, url, peer, messages, attempts=2)
        except Exception as exc:  # a bad name or a client bug costs these messages only
            logger.warning("messages for a worker not sent", peer=peer, messages=len(messages),
                           error=f"{type(exc).__name__}: {exc}"[:300])
            return
        self.calls += report.calls
        for message, why in report.failed:
            logger.warning("message for a worker not sent", peer=peer,
                           body=message.body()[:200], error=why)

    async def drain(self) -> None:
        """Wait until what was posted so far is sent (a stop, before the session ends)."""
        while self._flushes:
            await asyncio.wait(set(self._flushes))  # not cancelled with the caller
