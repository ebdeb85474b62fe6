"""The Lambda side of the order queues (``holdfast.core.orders``): sending and collecting.

**Giving** (``give_orders``, the router): a batch's stop and release orders reach each owner
as one message on its order queue and one write to its session item, however many.

**Sending** (``send_body``: the router's orders, the sweeper's rebalancing directives,
``holdfast drain``): one SQS message on the owner's own order queue, whose URL is
derived from the nudge queue's URL, the stack's prefix and the owner, so no lookup is needed.
The durable path (the order in the session item, read with the next heartbeat) always follows,
so nothing here fails a record: a queue that does not exist (the worker has none yet, or it is
gone with its session) is counted and logged at info, any other error logged at error and
counted.

**Collecting** (``QueueCollector``, the sweeper): a worker deletes its order queue when it stops
gracefully; a crashed or killed one cannot. An idle queue costs nothing (SQS bills requests), so
the sweeper collects them every few minutes rather than on every death: one ``ListQueues`` by
name prefix, then one Scan of the session table, and every queue that belongs to no ALIVE
session is deleted. Order matters: the queues are listed *before* the sessions are read. A
worker writes its session before it creates its queue, so a queue seen in the listing belongs to
a session the later scan sees (a consistent one); a queue created after the listing is simply
not looked at this time.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.aws import InvalidRequest
from holdfast.core.bundles import in_bundles, packed, send_bundled
from holdfast.core.exceptions import HoldfastError, MalformedItem
from holdfast.core.liveness import session_owner
from holdfast.core.nudge import Nudge
from holdfast.core.orders import (
    ORDERS_MARK,
    Order,
    is_missing_queue,
    order_queue_name,
    order_queue_names_start,
    order_queue_url,
)
from holdfast.core.schema import SessionState, worker_of_session_pk
from holdfast.core.session_sweep import SweepLog
from holdfast.core.sessions import SessionStore

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from mypy_boto3_sqs import SQSClient

    from holdfast.lambdas.router.decision import Decision

__all__ = ["COLLECT_EVERY_MS", "QueueCollector", "give_orders", "queue_handoffs", "queue_orders",
           "queues_to_delete", "send_body"]

log = logging.getLogger(__name__)

COLLECT_EVERY_MS = 300_000


def send_body(sqs: SQSClient, nudge_queue_url: str, prefix: str, owner: str,
              body: str) -> tuple[str, str]:
    """Send one message ``body`` to ``owner``'s order queue (a stop order, a directive).

    Returns (counter key, detail): ``order_queue_sent``, ``order_queue_missing`` (no such
    queue: the caller logs it at info) or ``order_queue_failed``; never raises for SQS.
    """
    try:
        url = order_queue_url(nudge_queue_url, prefix, owner)
        sqs.send_message(QueueUrl=url, MessageBody=body)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if is_missing_queue(exc):
            return "order_queue_missing", code
        return "order_queue_failed", f"{code}: {exc}"[:300]
    except (BotoCoreError, ValueError) as exc:
        return "order_queue_failed", f"{type(exc).__name__}: {exc}"[:300]
    return "order_queue_sent", ""


def queue_orders(decisions: Mapping[str, Decision], sqs: SQSClient, nudge_queue_url: str,
                 prefix: str, logger: Logger, *,
                 out_of_time: Callable[[], bool] = lambda: False) -> Counter[str]:
    """Send a batch's orders to their owners' order queues; counts by result, per order.

    One message per owner (a bundle, ``holdfast.core.bundles``: one receive takes them all):
    one message per order, one after the other, made a stop of 100 streams 100 sends. Best
    effort: once ``out_of_time()``, the rest are skipped (their session items carry them).
    """
    by_owner: dict[str, dict[str, Order]] = {}
    for decision in decisions.values():
        order, owner = decision.order(), decision.owner
        # Only sessions have order queues (a plain owner has none); one send per owner.
        if order is not None and owner is not None and session_owner(owner) is not None:
            by_owner.setdefault(owner, {})[order.encode()] = order
    counts: Counter[str] = Counter()
    for owner, orders in by_owner.items():
        if out_of_time():
            counts["order_queue_skipped"] += len(orders)
            continue
        for chunk in in_bundles(list(orders.values())):
            result, detail = send_body(sqs, nudge_queue_url, prefix, owner,
                                       packed(owner, [o.body(owner) for o in chunk]))
            counts[result] += len(chunk)
            for order in chunk:
                if result == "order_queue_failed":
                    logger.error("order not queued", conn_id=order.conn_id, owner=owner,
                                 detail=detail, verb=order.verb)
                else:
                    logger.info("order queued" if result == "order_queue_sent" else
                                "order not queued: no order queue", conn_id=order.conn_id,
                                owner=owner, detail=detail, verb=order.verb)
    return counts


def give_orders(decisions: Mapping[str, Decision], sqs: SQSClient,
                sessions: SessionStore | None, *, nudge_queue_url: str, prefix: str | None,
                logger: Logger, out_of_time: Callable[[], bool] = lambda: False,
                ) -> tuple[Counter[str], dict[str, str]]:
    """Give a batch's orders to their owners: the order queues (``queue_orders``, if
    ``prefix``), then the session items. Returns counts and the failed records' errors by
    sequence number (a session write that failed, or not tried once ``out_of_time()``: Lambda
    retries the record; an invocation timed out instead, its whole batch retried)."""
    counts = queue_orders(decisions, sqs, nudge_queue_url, prefix, logger,
                          out_of_time=out_of_time) if prefix else Counter()
    failures: dict[str, str] = {}
    if sessions is None:
        return counts, failures
    by_owner: dict[str, list[tuple[str, Order]]] = {}
    for seq, decision in decisions.items():
        order = decision.order()
        if order is not None and decision.owner is not None:
            by_owner.setdefault(decision.owner, []).append((seq, order))
    for owner, orders in by_owner.items():
        if out_of_time():
            for seq, order in orders:
                logger.warning("order not given: the invocation is out of time, retried",
                               conn_id=order.conn_id, owner=owner)
                failures[seq] = "order not given: out of time"
            continue
        # One write per owner, not per order: a stop of 100 streams of one worker was 100
        # writes to its one session item, one after the other (an invocation of 62 records
        # took 7.9 s on a loaded machine, and the records behind it waited).
        try:
            given = sessions.add_orders(owner, [order.encode() for _, order in orders])
        except InvalidRequest as exc:
            # The session item's own fault (its orders set mistyped by hand or another
            # writer): retried, the record held the shard for nothing, its batch's nudges
            # sent again each time. A stop is not lost (the holder's next checkpoint finds
            # STOPPED), and the order queue may have carried the order already; a forced
            # release (expiry 0, owner kept) waits for the holder's own end (ItemErrors says so).
            for _, order in orders:
                logger.error("order not given: the owner's session item is refused",
                             conn_id=order.conn_id, owner=owner, error=exc.message[:300])
            counts["order_refused"] += len(orders)
            continue
        except HoldfastError as exc:
            for seq, order in orders:
                logger.error("order not given", conn_id=order.conn_id, owner=owner,
                             error=str(exc)[:300])
                failures[seq] = f"order failed: {exc}"
            continue
        counts["ordered" if given else "order_no_session"] += len(orders)
        for _, order in orders:
            logger.info("order", verb=order.verb, conn_id=order.conn_id, owner=owner,
                        given=given)
    return counts, failures


def queue_handoffs(sqs: SQSClient, nudge_queue_url: str, prefix: str,
                   nudges: Iterable[Nudge], *, out_of_time: Callable[[], bool] = lambda: False,
                   ) -> tuple[list[Nudge], list[tuple[Nudge, str]]]:
    """Send each handoff nudge (``to`` set) to its successor's order queue, one bundle per
    successor (``holdfast.core.bundles``: one receive takes them all), one attempt (the
    caller falls back to the shared queue for what failed). ``out_of_time()`` is asked before
    each successor's call: a drain naming 32 successors is 32 calls, one after the other.
    Returns (sent, [(unsent, why)])."""
    by_owner: dict[str, list[Nudge]] = {}
    for nudge in nudges:
        if nudge.to is not None:
            by_owner.setdefault(nudge.to, []).append(nudge)
    sent: list[Nudge] = []
    failed: list[tuple[Nudge, str]] = []
    for owner, batch in by_owner.items():
        if out_of_time():
            failed.extend((n, "out of time") for n in batch)
            continue
        try:
            url = order_queue_url(nudge_queue_url, prefix, owner)
        except ValueError as exc:
            failed.extend((n, str(exc)[:200]) for n in batch)
            continue
        report = send_bundled(sqs, url, owner, batch, attempts=1)
        sent.extend(report.sent)
        failed.extend(report.failed)
    return sent, failed


def queues_to_delete(queue_urls: Iterable[str], live_owners: Iterable[str],
                     prefix: str, unknown_workers: Iterable[str] = ()) -> list[str]:
    """The listed order-queue URLs whose name belongs to none of ``live_owners``, nor to any
    session of ``unknown_workers`` (whose session item does not parse: alive or not, we
    cannot tell, so its queues stay).

    Not a name with another prefix's mark (``-orders-``) after ours: every prefix ends so, and
    another fleet's that begins with ours (``Feeds-orders-orders-`` under ``Feeds-orders-``,
    deployed from another app, where synth could not refuse it) names queues of sessions we
    do not know. At worst a dead queue of a worker whose id holds ``-orders-`` stays."""
    keep = {order_queue_name(prefix, owner) for owner in live_owners}
    unknown = tuple(order_queue_names_start(prefix, w) for w in unknown_workers)
    out = []
    for url in queue_urls:
        name = url.rsplit("/", 1)[-1]
        # From our prefix's last "-": "Feeds-orders-" + "orders-w9_c" holds the mark there.
        if (name.startswith(prefix) and name not in keep and not name.startswith(unknown)
                and ORDERS_MARK not in name[len(prefix) - 1:]):
            out.append(url)
    return out


@dataclass
class QueueCollector:
    """Every ``every_ms``: delete the order queues of sessions that are no longer alive."""

    prefix: str
    every_ms: int = COLLECT_EVERY_MS
    next_ms: int = 0
    deleted: int = 0
    # The sweeper's Powertools logger: a module logger's info lines never reach CloudWatch
    # (the Lambda runtime's root logger is at WARNING).
    log: SweepLog = log

    def step(self, sqs: SQSClient, sessions: SessionStore, now_ms: int) -> int:
        """Collect if due; returns the number of queues deleted (errors are logged)."""
        if now_ms < self.next_ms:
            return 0
        self.next_ms = now_ms + self.every_ms
        try:
            pages = sqs.get_paginator("list_queues").paginate(
                QueueNamePrefix=self.prefix, PaginationConfig={"PageSize": 1000})
            urls = [url for page in pages for url in page.get("QueueUrls", [])]
            if not urls:
                return 0
            # Consistent: "listed before scanned" holds only if the Scan sees every session
            # written before it began (an eventually consistent one could miss a new worker's
            # and delete its queue).
            scanned = list(sessions.scan(consistent=True))
        except (BotoCoreError, ClientError, HoldfastError) as exc:
            self.log.error("order queues not collected: %s", exc)
            return 0
        live = [s.owner for s in scanned
                if not isinstance(s, MalformedItem) and s.state is SessionState.ALIVE]
        unknown = [w for bad in scanned if isinstance(bad, MalformedItem)
                   if (w := _worker_of(bad.key)) is not None]
        deleted = 0
        for url in queues_to_delete(urls, live, self.prefix, unknown):
            try:
                sqs.delete_queue(QueueUrl=url)
            except (BotoCoreError, ClientError) as exc:
                # Already gone (a worker's own close raced us) is as good as deleted; anything
                # else (AccessDenied) is said: the queues would pile up unseen.
                if not is_missing_queue(exc):
                    self.log.error("order queue not deleted: %s: %s", url, exc)
                continue
            deleted += 1
            self.log.info("deleted an order queue without a live session: %s", url)
        self.deleted += deleted
        return deleted


def _worker_of(session_pk: str) -> str | None:
    """The worker id of a session item's key (None: not one)."""
    try:
        return worker_of_session_pk(session_pk)
    except ValueError:
        return None
