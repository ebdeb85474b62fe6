"""The Holdfast handler: ``HOLDFAST_HANDLER=transcripts.handler:handle``.

Each message is one transcript segment (the demo upstream's frames are JSON
``{"seq", "ts", "data"}``; the text is ``data``). It is written to the table named by
``$TRANSCRIPTS_TABLE``, idempotently (see ``transcripts.store``). The call returns only once
the write is durable: Holdfast checkpoints a seq after its handler returned, so a crash can
replay a message (refused as a duplicate) but never skip one. A write refused by the epoch
fence (a later holder has written this stream: this worker lost it while paused) is logged
and dropped: the successor delivers that seq, and this worker learns it lost the stream at
its next conditional write on the lease.
"""

from __future__ import annotations

import asyncio
import json
import os
from functools import cache

import boto3
from aws_lambda_powertools import Logger

from holdfast import Message, StaleEpoch
from transcripts.store import TABLE_ENV, SegmentStore

__all__ = ["handle", "text_of"]

logger = Logger(service="transcripts", child=True)


@cache
def _store() -> SegmentStore:
    # One client per worker process; boto3 reads the endpoint and region from the environment.
    return SegmentStore(boto3.client("dynamodb"), os.environ[TABLE_ENV])


def text_of(data: str | bytes) -> str:
    """The segment text of one frame: its ``data`` field, else the frame itself."""
    raw = data.decode(errors="replace") if isinstance(data, bytes) else data
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
        return raw
    return str(obj.get("data", raw)) if isinstance(obj, dict) else raw


async def handle(message: Message) -> None:
    if message.seq is None:  # no seq, no idempotency key: a real app would decide; we skip
        logger.warning("segment without seq skipped", conn_id=message.conn_id)
        return
    # boto3 blocks: run it off the event loop that keeps the leases alive.
    try:
        written = await asyncio.to_thread(_store().put, message.conn_id, message.seq,
                                          text_of(message.data), message.worker_id,
                                          message.epoch)
    except StaleEpoch as refused:
        logger.warning("late segment refused: a later holder has written this stream",
                       conn_id=message.conn_id, seq=message.seq, epoch=refused.epoch,
                       fence_epoch=refused.seen)
        return
    if not written:
        logger.info("replayed segment already stored", conn_id=message.conn_id,
                    seq=message.seq)
