"""The sweep loop: find orphans through the GSI, nudge the ones ``NudgeMemory`` picks, repeat.

Each sweep is one ``find_orphans`` Query (more pages only while orphans exist), so when nothing
is expired it costs one round trip whatever the fleet size. The query looks ``lookahead_ms``
ahead: leases that become claimable before the next sweep tell the loop when to wake, so an
expired lease is nudged within milliseconds of becoming claimable (expiry + skew) instead of up
to a whole interval later. Clock, sleep and the stop condition are parameters: the Lambda stops
before its timeout, the local runner on its shutdown event, tests whenever they like.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core import names, rules, tracing
from holdfast.core import settings as S
from holdfast.core.exceptions import HoldfastError, MalformedItem
from holdfast.core.liveness import AUDIT_INTERVAL_MS, AuditResult, OwnerAudit
from holdfast.core.nudge import REASON_EXPIRED, REASON_REAPED, REASON_UNCLAIMED, Nudge
from holdfast.core.placement import fill, new_version
from holdfast.core.sending import send_nudges
from holdfast.core.session_sweep import ReportedKeys
from holdfast.core.sessions import SessionStore, SessionSweep, SweepLog, sweep_sessions
from holdfast.core.store import LeaseStore, wall_clock_ms
from holdfast.core.table import count_owned, find_orphans
from holdfast.lambdas.orderqueues import QueueCollector, queue_handoffs
from holdfast.lambdas.settings import Settings
from holdfast.lambdas.sweeper.balancer import Balancer, BalanceRound, members_of
from holdfast.lambdas.sweeper.dedup import NudgeMemory, RenudgePolicy
from holdfast.lambdas.sweeper.results import SweepResult, SweepStats, log_result
from holdfast.lambdas.sweeper.unindexed import UnindexedPass

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

__all__ = ["SweepDeps", "memory_for", "run_sweeps", "session_store_for", "sweep_once"]

log = logging.getLogger(__name__)
T = TypeVar("T")

MIN_WAIT_MS = 5  # never spin: DynamoDB Local and the index need a moment between queries
PAGE_SIZE = 200
MAX_SCAN = 1_000  # orphans read per sweep; the rest wait for the next sweep (a second later)
MAX_ERROR_BACKOFF_MS = 5_000
# How long after a reap a dead worker's long polls may still be pending on the shared queue,
# each swallowing the next nudge until its visibility timeout: at most the longest poll wait.
# Meanwhile the orphans a sweep nudges go on live workers' order queues too: a release's nudge
# swallowed that way (and the sweep's own, 0.5 s later) held a stream unowned 4.5 s in a soak.
PENDING_POLLS_MS = S.POLL_SECONDS.hi * 1000


@dataclass
class SweepDeps:
    ddb: DynamoDBClient
    sqs: SQSClient
    settings: Settings
    clock: Callable[[], int] = wall_clock_ms
    sleep: Callable[[float], object] = time.sleep
    log: SweepLog | None = None
    sessions: SessionStore | None = None  # None: no session table, leases only
    # The slow pass for items without an expiry; made from the settings on first use.
    unindexed: UnindexedPass | None = None
    # Deletes order queues no live session reads; made from the settings on first use.
    orders: QueueCollector | None = None
    # The rebalancing decider (at most one decision per interval); made on first use.
    balancer: Balancer | None = None
    # Finds streams owned by a session that is not live (holdfast.core.liveness).
    audit: OwnerAudit | None = None
    # When this sweeper last reaped a session (wall ms): its worker's long polls may still be
    # pending on the shared queue (``PENDING_POLLS_MS``).
    last_reap_ms: int | None = None
    # Keys of malformed items already logged: index entries (``_report_foreign``), sessions.
    reported_keys: ReportedKeys = field(default_factory=ReportedKeys)


def session_store_for(ddb: DynamoDBClient, settings: Settings) -> SessionStore | None:
    """The session store the sweeper (and router) use; None when no session table is set."""
    if settings.session_table is None:
        return None
    return SessionStore(ddb, settings.session_table, settings.table, ttl_ms=settings.lease_ms,
                        skew_ms=settings.skew_ms, reap_mode=settings.renew_mode)


def memory_for(settings: Settings) -> NudgeMemory:
    """A fresh ``NudgeMemory`` with the re-nudge policy of ``settings``."""
    return NudgeMemory(RenudgePolicy(
        first_ms=settings.renudge_ms, max_ms=max(settings.renudge_ms, settings.renudge_max_ms),
        unclaimed_grace_ms=settings.unclaimed_grace_ms))


def sweep_once(deps: SweepDeps, memory: NudgeMemory) -> SweepResult:
    """One sweep; raises ``HoldfastError`` if DynamoDB did not answer the orphans' query (a step
    that fails is logged and skipped; SQS errors are reported). The owner audit, the slow pass
    and the queue collection come after the nudges, so a sweep whose orphans' query failed
    (the same table, refusing) runs none of them."""
    s = deps.settings
    now = deps.clock()
    # The steps before the orphans' query are guarded: one failing (a throttled Scan, a
    # missing permission) must not stop every re-nudge of a lost nudge's stream.
    failed_steps: list[str] = []
    swept = _guarded(deps, failed_steps, "sessions", lambda: (
        sweep_sessions(deps.sessions, now, s.skew_ms, deps.log or log, deps.reported_keys)
        if deps.sessions is not None else SessionSweep()), None)
    sessions = swept if swept is not None else SessionSweep()
    if sessions.dead or sessions.released:
        deps.last_reap_ms = now
    _nudge_live(deps, sessions, [Nudge(c, REASON_REAPED) for c in sessions.released])
    found = list(islice(find_orphans(deps.ddb, s.table, now_ms=now + s.sweep_interval_ms,
                                     skew_ms=s.skew_ms, page_size=PAGE_SIZE), MAX_SCAN))
    items = [o for o in found if not isinstance(o, MalformedItem)]
    foreign = _report_foreign(deps, [o for o in found if isinstance(o, MalformedItem)])
    cutoff = rules.acquire_cutoff_ms(now, s.skew_ms)
    due = [o for o in items if o.expires_at_ms <= cutoff]
    upcoming = [o.expires_at_ms for o in items if o.expires_at_ms > cutoff]
    chosen = memory.select(due, now)
    by_id = {o.conn_id: o for o in chosen}
    # KEYS_ONLY index: expiry 0 means released or never claimed, anything else expired.
    nudges = [Nudge(o.conn_id, REASON_UNCLAIMED if o.expires_at_ms == 0 else REASON_EXPIRED,
                    None)
              for o in chosen]
    spans = [tracing.start_span(names.SPAN_SWEEP, n.conn_id) for n in nudges]
    if tracing.enabled():  # each orphan's acquisition trace starts at the sweep that found it
        nudges = [dataclasses.replace(n, traceparent=tracing.inject(span))
                  for n, span in zip(nudges, spans, strict=True)]
    report = send_nudges(deps.sqs, s.queue_url, nudges, attempts=s.send_attempts,
                         sleep=deps.sleep)
    for span in spans:
        if span is not None:
            span.end()
    memory.record_sent([by_id[n.conn_id] for n in report.sent], now)
    if deps.last_reap_ms is not None and now - deps.last_reap_ms <= PENDING_POLLS_MS:
        reaped = set(sessions.released)  # on a live queue a moment ago
        _nudge_live(deps, sessions, [n for n in report.sent if n.conn_id not in reaped])
    # After the nudges, which claims wait on: on a throttled table these steps' calls retry
    # for seconds each, and ahead of the nudges they held every re-nudge of a lost stream.
    # The audit not without the live sessions: it would read every owner's session (on a
    # table that just refused a Scan), as the balancer would see no worker.
    audit = _guarded(deps, failed_steps, "owner audit", lambda: _audit_step(deps, sessions, now),
                     None) if swept is not None else None
    normalised = _guarded(deps, failed_steps, "unindexed items",
                          lambda: _unindexed_step(deps, now), 0)
    _guarded(deps, failed_steps, "order queues", lambda: _orders_step(deps, now), 0)
    # ``due`` are the unowned STARTED streams.
    balance = _balance_step(deps, sessions, len(due), now) if swept is not None else None
    complete = len(found) < MAX_SCAN
    if complete:
        memory.retain_only(due)
    else:
        memory.prune(now)
    # An expired lease is unowned since its expiry; a released or never-claimed one (expiry 0)
    # since this sweeper first saw it: a lower bound after a cold start, but never "not at all",
    # so a stream that no worker can take still raises the orphan-age alarm. (Not one whose
    # item is malformed: parked again at every claim, its expiry moves on; the worker's
    # StreamsQuarantined count is its alarm.)
    ages = [now - (o.expires_at_ms if o.expires_at_ms > 0 else
                   (memory.unowned_since_ms(o) or now)) for o in due]
    next_claimable = rules.claimable_at_ms(min(upcoming), s.skew_ms) if upcoming else None
    # A grace or re-nudge window ending wakes the sweep too, but at most every quarter interval:
    # a burst of inserts has a due time every few ms, and sweeping that often (5 ms apart)
    # loaded DynamoDB and the runner so much that 300 streams started 2x slower.
    renudge = memory.next_due_ms(now)
    if renudge is not None:
        renudge = max(renudge, now + s.sweep_interval_ms // 4)
    wake = [t for t in (next_claimable, sessions.next_due_ms, renudge) if t is not None]
    return SweepResult(due, report.sent, report.failed, min(wake, default=None), complete,
                       max(ages, default=0), sessions.dead, sessions.reaped, sessions.malformed,
                       normalised, balance, audit,
                       sessions.item_errors + (len(audit.errors) if audit else 0)
                       + (deps.unindexed.refused if deps.unindexed else 0) + foreign,
                       len(failed_steps))


def _nudge_live(deps: SweepDeps, sessions: SessionSweep, shared: list[Nudge]) -> int:
    """Send the nudges ``shared`` on live workers' order queues as well, the least loaded first
    (``placement.fill``, up to each one's capacity), in one bundle per worker: the streams
    just reaped, and while a reaped worker's polls may be pending (``PENDING_POLLS_MS``) the
    orphans this sweep nudged. Each has a nudge on the shared queue too, but a killed worker's
    long polls may still be pending there and swallow it until its visibility timeout; a live
    worker's own queue has no such reader, and one receive takes the whole bundle. Whoever
    claims first wins; the other nudge finds the stream taken. Returns the nudges sent."""
    prefix = deps.settings.orders_queue_prefix
    if prefix is None or not shared:
        return 0  # most sweeps: nothing to send, nothing to work out
    everyone = members_of(sessions.alive)
    live = [m for m in everyone if not m.draining]
    deploying = new_version(everyone)
    if deploying is not None:
        # A deploy: to the new version, as every move of it goes (an old worker hands its
        # streams on again when it stops); the shared queue's nudge still reaches anyone.
        live = [m for m in live if m.version == deploying] or live
    if not live:
        return 0
    loads = {m.owner: m.load for m in live}
    caps = {m.owner: float(m.capacity) if m.capacity > 0 else math.inf for m in live}
    each = iter(shared)
    nudges = [dataclasses.replace(nudge, to=owner)
              for owner, n in fill(loads, caps, len(shared), most=len(loads))
              for nudge in islice(each, n)]
    sent, failed = queue_handoffs(deps.sqs, deps.settings.queue_url, prefix, nudges)
    if failed:  # the shared queue's nudges still stand
        (deps.log or log).info("%s streams not nudged on a live worker's queue: %d (%s)",
                               shared[0].reason, len(failed), failed[0][1])
    return len(sent)


def _report_foreign(deps: SweepDeps, entries: list[MalformedItem]) -> int:
    """Index entries no stream could have (counted in ``ItemErrors`` every pass, as they stay
    until fixed); each logged once a sandbox, not every sweep: 86,000 lines a day each."""
    for entry in entries:
        if deps.reported_keys.first(entry.key):
            (deps.log or log).error("a STARTED item of the lease table is no stream's, fix or "
                                    "delete it (counted in ItemErrors every pass): %s", entry)
    return len(entries)


def _guarded(deps: SweepDeps, failed: list[str], step: str, run: Callable[[], T],
             fallback: T) -> T:
    """``run()``, or ``fallback`` with an error line (and ``step`` in ``failed``) if DynamoDB
    or SQS did not answer."""
    try:
        return run()
    except (HoldfastError, BotoCoreError, ClientError) as exc:
        (deps.log or log).error("sweep step failed, the sweep goes on: %s: %s", step, exc)
        failed.append(step)
        return fallback


def _audit_step(deps: SweepDeps, sessions: SessionSweep, now: int) -> AuditResult | None:
    if deps.sessions is None:
        return None
    if deps.audit is None:
        deps.audit = OwnerAudit(AUDIT_INTERVAL_MS, deps.sessions.ttl_ms, deps.settings.skew_ms)
    if not deps.audit.due(now):
        return None
    return deps.audit.run(deps.sessions, {s.owner for s in sessions.alive}, now)


def _unindexed_step(deps: SweepDeps, now: int) -> int:
    s = deps.settings
    if deps.unindexed is None:
        deps.unindexed = UnindexedPass(s.unindexed_scan_ms)
    store = LeaseStore(deps.ddb, s.table, skew_ms=s.skew_ms)
    return deps.unindexed.step(deps.ddb, s.table, now, store.normalise)


def _orders_step(deps: SweepDeps, now: int) -> int:
    prefix = deps.settings.orders_queue_prefix
    if prefix is None or deps.sessions is None:
        return 0
    if deps.orders is None:
        deps.orders = QueueCollector(prefix, log=deps.log or log)
    return deps.orders.step(deps.sqs, deps.sessions, now)


def _balance_step(deps: SweepDeps, sessions: SessionSweep, unowned: int,
                  now: int) -> BalanceRound | None:
    if deps.sessions is None or not deps.settings.balance:
        return None
    if deps.balancer is None:
        deps.balancer = Balancer(deps.settings)
    return deps.balancer.step(deps.sessions, deps.sqs, sessions.alive, unowned=unowned,
                              now_ms=now, logger=deps.log or log,
                              count=lambda owner: count_owned(deps.ddb, deps.settings.table,
                                                              owner))


def run_sweeps(deps: SweepDeps, memory: NudgeMemory, *, should_stop: Callable[[], bool],
               stats: SweepStats | None = None,
               pause_left_s: Callable[[], float] | None = None) -> SweepStats:
    """Sweep until ``should_stop()``; errors are logged and retried with a short back-off.
    ``pause_left_s()``: the longest pause between two sweeps may last from now (the time to
    the invocation's margin): a back-off after failed sweeps grows to 5 s, past the margin."""
    logger: SweepLog = deps.log or log
    stats = stats if stats is not None else SweepStats()
    interval = deps.settings.sweep_interval_ms
    errors_in_row = 0
    while not should_stop():
        wait_ms = interval
        started = deps.clock()
        try:
            result = sweep_once(deps, memory)
        except (HoldfastError, BotoCoreError, ClientError) as exc:
            errors_in_row += 1
            stats.errors += 1
            wait_ms = min(MAX_ERROR_BACKOFF_MS, interval * 2 ** min(errors_in_row - 1, 10))
            logger.error("sweep failed (%d in a row), next try in %d ms: %s",
                         errors_in_row, wait_ms, exc)
        else:
            errors_in_row = 0
            stats.add(result)
            log_result(logger, result)
            if result.next_due_ms is not None:
                wait_ms = min(interval, result.next_due_ms - deps.clock())
        finally:
            stats.longest_ms = max(stats.longest_ms, deps.clock() - started)
        if should_stop():
            break
        pause_s = max(MIN_WAIT_MS, wait_ms) / 1000
        if pause_left_s is not None:
            pause_s = max(0.0, min(pause_s, pause_left_s()))
        deps.sleep(pause_s)
    return stats
