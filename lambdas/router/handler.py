"""The stream router: DynamoDB Streams records of the lease table -> SQS nudges.

Each invocation (1) decides every record with the pure ``decide``, (2) sends all nudges in
``SendMessageBatch`` calls of 10 (one nudge per connection and delay, however many records
asked; before them, a stream written over is held out of claims until its holder takes it
back, ``core.overwrites``), (3) normalises items that lack an expiry, (4) gives orders (stop,
release, retake) to a stream's holder: first a message on the owner's order queue when
``HOLDFAST_ORDERS_QUEUE_PREFIX`` is set (``orderqueues``, best effort), then the durable order
in its session item, then (5) lets Powertools' ``BatchProcessor`` turn the outcome into a
partial batch response: a record whose nudge, normalisation or session order failed is
reported by sequence number so Lambda retries from it; a malformed record is logged, counted
and skipped, so it never blocks the shard.

Clients are built on first use from the standard environment (``AWS_ENDPOINT_URL_*``), so the
module imports without AWS settings (``router.deps``); ``configure()`` injects dependencies in
tests.

Tracing (``holdfast.core.tracing``, off by default): each nudge sent gets a ``route`` span, from
the invocation's start to the send, whose ``traceparent`` the nudge carries to the worker.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from holdfast.core import names, tracing
from holdfast.core.exceptions import NudgeNotSent
from holdfast.core.nudge import Nudge
from holdfast.core.schema import ATTR
from holdfast.core.sending import send_nudges
from holdfast.lambdas.metrics import (
    METRICS_NAMESPACE,
    emit_counts_by,
    metrics_enabled,
    service_name,
)
from holdfast.lambdas.orderqueues import give_orders, queue_handoffs
from holdfast.lambdas.router.decide import Decision, Outcome, decide
from holdfast.lambdas.router.deps import SEND_RESERVE_MS, RouterDeps, configure, current_deps
from holdfast.lambdas.router.expiries import ExpiryTarget, expiry_targets, write_expiries

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["METRICS_NAMESPACE", "SEND_RESERVE_MS", "RouterDeps", "configure", "lambda_handler",
           "route"]

SERVICE = service_name("holdfast-router")
logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)
tracing.setup(SERVICE)
# A batch whose every record failed is still answered with a partial response (all reported),
# so Lambda's retry, bisect and on-failure settings apply the same way to 1 or N failures.
processor = BatchProcessor(event_type=EventType.DynamoDBStreams,
                           raise_on_entire_batch_failure=False)


@dataclass
class _Plan:
    """Per-invocation results: decisions by record, and failures by sequence number."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    # Records whose new image names an owner or a status: written by the protocol.
    by_holder: dict[str, bool] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    start_ns: int = 0


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Lambda entry point (DynamoDB Streams event source mapping, ReportBatchItemFailures)."""
    try:
        return route(event, context, current_deps())
    finally:
        tracing.flush()  # a frozen sandbox exports nothing until its next invocation


def route(event: dict[str, Any], context: LambdaContext | None,
          deps: RouterDeps) -> dict[str, Any]:
    """Handle one batch with explicit dependencies; returns the partial batch response."""
    raw_records: list[Any] = event.get("Records") or []
    if not isinstance(raw_records, list):
        raw_records = []
    records = [r for r in raw_records if isinstance(r, dict)]
    if not records:
        # Nothing Lambda could retry either: say so and answer "no failures".
        logger.warning("event has no stream records", extra={"event_keys": sorted(event)[:10]})
        return {"batchItemFailures": []}
    if len(records) != len(raw_records):
        logger.warning("non-object stream records skipped",
                       extra={"skipped": len(raw_records) - len(records)})
    plan = _decide_all(records, deps)
    plan.start_ns = time.time_ns()
    out_of_time = _out_of_time(context)
    targets = expiry_targets(plan.decisions, plan.by_holder)
    # A take-back's hold before any nudge of this batch: none may claim the stream first.
    _expiries(plan, deps, targets, out_of_time, holds=True)
    # A hold not written (throttled, out of time): its stream's nudges wait for the retry.
    unheld = {conn_id for conn_id, target in targets.items() if target.hold is not None
              and any(seq in plan.failures for seq in target.seqs)}
    _send(plan, deps, out_of_time, unheld)
    _expiries(plan, deps, targets, out_of_time, holds=False)
    _order(plan, deps, out_of_time)
    _emit_metrics(plan, len(records))

    def record_handler(record: DynamoDBRecord) -> None:
        seq = _seq(record.raw_event)
        if seq in plan.failures:
            decision = plan.decisions.get(seq)
            conn_id = decision.conn_id if decision and decision.conn_id else "?"
            raise NudgeNotSent(conn_id, plan.failures[seq])

    response: dict[str, Any] = dict(process_partial_response(
        event={"Records": records}, record_handler=record_handler, processor=processor,
        context=context))
    return response


def _created_ms(created: object) -> int | None:
    """A record's ``ApproximateCreationDateTime`` (s) in ms; None if it is not a finite number
    (a hand-built or corrupted record: its decision is made as for a record of unknown age)."""
    if isinstance(created, bool) or not isinstance(created, int | float) or not math.isfinite(
            created):
        return None
    return round(created * 1000)


def _seq(raw: dict[str, Any]) -> str:
    dynamodb = raw.get("dynamodb")
    seq = dynamodb.get("SequenceNumber") if isinstance(dynamodb, dict) else None
    return seq if isinstance(seq, str) else ""


def _decide_all(records: list[dict[str, Any]], deps: RouterDeps) -> _Plan:
    plan = _Plan()
    now = deps.clock()
    for index, raw in enumerate(records):
        seq = _seq(raw) or f"#{index}"  # keyed apart; such a record cannot be reported anyway
        dynamodb = raw.get("dynamodb")
        if not isinstance(dynamodb, dict):
            dynamodb = {}
        event_name = raw.get("eventName")
        created = dynamodb.get("ApproximateCreationDateTime")
        decision = decide(event_name if isinstance(event_name, str) else None,
                          dynamodb.get("OldImage"), dynamodb.get("NewImage"), now,
                          skew_ms=deps.settings.skew_ms, lease_ms=deps.settings.lease_ms,
                          created_ms=_created_ms(created))
        if seq.startswith("#") and decision.acts:
            # Without a sequence number a failure could not be reported; say so loudly.
            logger.error("stream record has no SequenceNumber", conn_id=decision.conn_id)
        plan.decisions[seq] = decision
        new_image = dynamodb.get("NewImage")
        plan.by_holder[seq] = isinstance(new_image, dict) and bool(
            {ATTR.lease_owner, ATTR.status} & new_image.keys())
        plan.counts[decision.outcome.value] += 1
        fields = {"conn_id": decision.conn_id, "outcome": decision.outcome.value,
                  "reason": decision.reason.value, "event_name": event_name,
                  "sequence_number": seq, "epoch": decision.epoch}
        if decision.outcome is Outcome.MALFORMED:
            logger.warning("malformed stream record skipped",
                           extra={**fields, "detail": decision.detail})
        elif decision.malformed:
            plan.counts[Outcome.MALFORMED.value] += 1
            logger.warning("malformed stream record: its owner is told to stop",
                           extra={**fields, "owner": decision.owner, "detail": decision.detail})
        else:
            logger.info("router decision", extra={
                **fields, "delay_s": decision.delay_s, "normalise": decision.normalise,
                "hold_until_ms": decision.hold_until_ms})
    return plan


def _out_of_time(context: LambdaContext | None) -> Callable[[], bool]:
    if context is None:
        return lambda: False
    # Room for one more call at its worst and the partial response (``SEND_RESERVE_MS``).
    return lambda: context.get_remaining_time_in_millis() < SEND_RESERVE_MS


def _send(plan: _Plan, deps: RouterDeps, out_of_time: Callable[[], bool],
          unheld: set[str]) -> None:
    # One nudge per (connection, delay): a burst of records about one item nudges it once.
    wanted: dict[tuple[str, int], Nudge] = {}
    records_of: dict[tuple[str, int], list[str]] = {}
    for seq, decision in plan.decisions.items():
        nudge = decision.nudge()
        if nudge is not None and nudge.conn_id in unheld:
            plan.failures.setdefault(seq, "its stream's take-back hold was not written")
        elif nudge is not None:
            key = (nudge.conn_id, nudge.delay_s)
            wanted[key] = nudge  # the latest record's reason and epoch win
            records_of.setdefault(key, []).append(seq)
    _hand_off(plan, deps, wanted, out_of_time)
    if not wanted:
        return
    spans = {}
    if tracing.enabled():  # one trace per acquisition: it starts here, at the record
        for key, nudge in wanted.items():
            span = tracing.start_span(names.SPAN_ROUTE, nudge.conn_id, start_ns=plan.start_ns)
            if span is not None:
                span.set_attribute("holdfast.reason", nudge.reason)
                spans[key] = span
                wanted[key] = dataclasses.replace(nudge, traceparent=tracing.inject(span))
    report = send_nudges(deps.sqs, deps.settings.queue_url, list(wanted.values()),
                         attempts=deps.settings.send_attempts, sleep=deps.sleep,
                         out_of_time=out_of_time)
    for span in spans.values():
        span.end()
    for nudge in report.sent:
        plan.counts[f"sent:{nudge.reason}"] += 1
    for nudge, error in report.failed:
        plan.counts["send_failed"] += 1
        logger.error("nudge not sent", conn_id=nudge.conn_id, reason=nudge.reason, error=error)
        # Keyed by the nudge as decided (a handoff's fallback may have been made immediate).
        for key in [k for k, n in wanted.items() if n == nudge]:
            for seq in records_of[key]:
                plan.failures[seq] = error


def _hand_off(plan: _Plan, deps: RouterDeps, wanted: dict[tuple[str, int], Nudge],
              out_of_time: Callable[[], bool]) -> None:
    """Tell each handoff's successor on its own order queue now; the shared nudge in
    ``wanted`` stays delayed until the hold ends (whoever has room takes it then). Where the
    successor cannot be told (no order queues, its queue is gone, the invocation is short of
    time), the shared nudge goes now: until the hold ends, only the successor's acquire
    succeeds."""
    successor = {decision.conn_id: decision.successor for decision in plan.decisions.values()
                 if decision.successor is not None and decision.conn_id is not None}
    handoffs = [dataclasses.replace(n, to=successor[n.conn_id], delay_s=0)
                for n in wanted.values() if n.conn_id in successor]
    if not handoffs:
        return
    prefix = deps.settings.orders_queue_prefix
    sent, failed = (queue_handoffs(deps.sqs, deps.settings.queue_url, prefix, handoffs,
                                   out_of_time=out_of_time)
                    if prefix else ([], [(n, "no order queues") for n in handoffs]))
    plan.counts["handoff_sent"] += len(sent)
    for nudge, why in failed:
        plan.counts["handoff_not_queued"] += 1
        logger.info("handoff not queued for its successor: shared queue now",
                    conn_id=nudge.conn_id, successor=nudge.to, detail=why)
        for key in [k for k in wanted if k[0] == nudge.conn_id]:
            wanted[key] = dataclasses.replace(wanted[key], delay_s=0)
    for nudge in sent:
        logger.info("handoff queued for its successor", conn_id=nudge.conn_id,
                    successor=nudge.to)


def _order(plan: _Plan, deps: RouterDeps, out_of_time: Callable[[], bool]) -> None:
    """Give each order (stop, release, retake) to its owner (``orderqueues.give_orders``):
    its order queue first (fast, best effort), then its session item (durable). An owner
    with no live session to take it is the sweeper's: its owner audit releases that stream
    (``holdfast.core.liveness``). Within the invocation's time: what is left once it runs
    short goes back as record failures, retried alone."""
    counts, failures = give_orders(plan.decisions, deps.sqs, deps.sessions,
                                   nudge_queue_url=deps.settings.queue_url,
                                   prefix=deps.settings.orders_queue_prefix, logger=logger,
                                   out_of_time=out_of_time)
    plan.counts.update(counts)
    plan.failures.update(failures)


def _expiries(plan: _Plan, deps: RouterDeps, targets: Mapping[str, ExpiryTarget],
              out_of_time: Callable[[], bool], *, holds: bool) -> None:
    counts, failures = write_expiries(targets, plan.failures, deps.store, holds=holds,
                                      logger=logger, out_of_time=out_of_time)
    plan.counts.update(counts)
    plan.failures.update(failures)


def _emit_metrics(plan: _Plan, n_records: int) -> None:
    if not metrics_enabled():
        return
    for name, value in {names.METRIC_RECORDS: n_records,
                        names.METRIC_RECORDS_SKIPPED: plan.counts[Outcome.SKIP.value],
                        names.METRIC_MALFORMED_RECORDS: plan.counts[Outcome.MALFORMED.value],
                        names.METRIC_NUDGES_FAILED: plan.counts["send_failed"],
                        names.METRIC_NORMALISED: plan.counts["normalised"],
                        # Items it could not write for their own fault (alarmed with the
                        # sweeper's): a stream too big to normalise, a mistyped session item.
                        names.METRIC_ITEM_ERRORS: (plan.counts["normalise_refused"]
                                                   + plan.counts["order_refused"])}.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    emit_counts_by(names.METRIC_ORDER_QUEUE_SENDS, names.DIMENSION_RESULT,
                   {k[12:]: n for k, n in plan.counts.items() if k.startswith("order_queue_")},
                   service=SERVICE)
    emit_counts_by(names.METRIC_NUDGES, names.DIMENSION_REASON,
                   {k[5:]: n for k, n in plan.counts.items() if k.startswith("sent:")},
                   service=SERVICE)
