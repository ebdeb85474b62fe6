"""Collecting order queues that no live session reads (``holdfast.core.orders``).

A worker deletes its order queue when it stops gracefully; a crashed or killed one cannot. An
idle queue costs nothing (SQS bills requests), so the sweeper collects them every few minutes
rather than on every death: one ``ListQueues`` by name prefix, then one Scan of the session
table, and every queue that belongs to no ALIVE session is deleted.

Order matters: the queues are listed *before* the sessions are read. A worker writes its
session before it creates its queue, so a queue seen in the listing belongs to a session the
later scan sees; a queue created after the listing is simply not looked at this time.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.exceptions import HoldfastError, MalformedItem
from holdfast.core.orders import order_queue_name
from holdfast.core.schema import SessionState
from holdfast.core.sessions import SessionItem, SessionStore

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["COLLECT_EVERY_MS", "QueueCollector", "queues_to_delete"]

log = logging.getLogger(__name__)

COLLECT_EVERY_MS = 300_000


def queues_to_delete(queue_urls: Iterable[str], live_owners: Iterable[str],
                     prefix: str) -> list[str]:
    """The listed order-queue URLs whose name belongs to none of ``live_owners``."""
    keep = {order_queue_name(prefix, owner) for owner in live_owners}
    return [url for url in queue_urls
            if url.rsplit("/", 1)[-1].startswith(prefix) and url.rsplit("/", 1)[-1] not in keep]


@dataclass
class QueueCollector:
    """Every ``every_ms``: delete the order queues of sessions that are no longer alive."""

    prefix: str
    every_ms: int = COLLECT_EVERY_MS
    next_ms: int = 0
    deleted: int = 0

    def step(self, sqs: SQSClient, sessions: SessionStore, now_ms: int) -> int:
        """Collect if due; returns the number of queues deleted (errors are logged)."""
        if now_ms < self.next_ms:
            return 0
        self.next_ms = now_ms + self.every_ms
        try:
            urls = _list(sqs, self.prefix)
            if not urls:
                return 0
            live = [s.owner for s in sessions.scan()
                    if not isinstance(s, MalformedItem) and _alive(s)]
        except (BotoCoreError, ClientError, HoldfastError) as exc:
            log.warning("order queues not collected: %s", exc)
            return 0
        doomed = queues_to_delete(urls, live, self.prefix)
        for url in doomed:
            # Already gone (a worker's own close raced us) is as good as deleted.
            with contextlib.suppress(BotoCoreError, ClientError):
                sqs.delete_queue(QueueUrl=url)
        if doomed:
            log.info("deleted %d order queues without a live session", len(doomed))
        self.deleted += len(doomed)
        return len(doomed)


def _alive(item: SessionItem) -> bool:
    return item.state is SessionState.ALIVE


def _list(sqs: SQSClient, prefix: str) -> list[str]:
    urls: list[str] = []
    kwargs: dict[str, Any] = {"QueueNamePrefix": prefix, "MaxResults": 1000}
    while True:
        resp = sqs.list_queues(**kwargs)
        urls += resp.get("QueueUrls", [])
        token = resp.get("NextToken")
        if not token:
            return urls
        kwargs["NextToken"] = token
