"""Rebalancing, the decider's side: at most one decision every ``balance_interval_ms``, and
one at once when a member begins draining.

The sweeper is the one decider (README, "Rebalancing"). It scans the session table on every
sweep anyway, so a decision reads nothing more: the live sessions of that scan (their load,
capacity and drain flag) and the number of STARTED streams the same sweep found unowned go
into ``holdfast.core.balance.plan``. What it costs:

- **A balanced fleet: nothing.** No write at all, except once at the end of a rebalance:
  each target still live is lapsed (one write and one message per worker), so no stale claim
  ceiling keeps a stream unowned after the fleet is balanced (a failover's streams, new
  ones). A worker without a live target claims as it always did.
- **Out of balance: one conditional UpdateItem per session whose target changed** (or whose
  unchanged target has less than half its TTL left), plus the same directive on that
  session's order queue so the worker acts within milliseconds rather than a heartbeat later.

``in_motion`` is the unowned count too. A stream being shed is released by its holder, which
makes it an unowned STARTED stream that the next sweep finds; a stream of a failover is one
already. So the streams unowned *are* the streams in motion, at most a sweep late, and a mass
failover leaves no budget for moves until its streams are claimed again.

A DynamoDB error skips the rest of the round (logged): targets are absolute, so the next
decision, two seconds later, writes what this one did not. A write refused as invalid (one
session item DynamoDB will not update, say near its size limit) skips that session alone: the
same refusal would otherwise end every round at the same member. It never fails the sweep.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from holdfast.core.aws import InvalidRequest
from holdfast.core.balance import BalancePolicy, Member, Plan
from holdfast.core.directives import Directive
from holdfast.core.exceptions import HoldfastError
from holdfast.core.placement import place
from holdfast.core.sessions import SessionItem, SessionStore, SweepLog
from holdfast.lambdas.orderqueues import send_body
from holdfast.lambdas.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["BalanceRound", "Balancer", "members_of", "same_target", "summary"]

log = logging.getLogger(__name__)

SUMMARY_MEMBERS = 8  # members named in a decision's log line; the rest are counted
_OWNER_CHARS = 60


@dataclass(frozen=True, slots=True)
class BalanceRound:
    """One decision: ``imbalance`` is the plan's excess (the least load that must move),
    ``written`` the targets written, ``sent`` the directives on order queues."""

    imbalance: float
    balanced: bool
    written: int = 0
    sent: int = 0
    failed: bool = False  # DynamoDB refused: the rest of the round was skipped


def same_target(current: Directive | None, new: Directive, now_ms: int, ttl_ms: int) -> bool:
    """True if ``current`` already says what ``new`` says and lives more than half ``ttl_ms``
    on: rewriting it would only cost a write (and a message) every decision."""
    if current is None or current.until_ms - now_ms <= ttl_ms / 2:
        return False
    # The item keeps six significant digits of a fractional share (Directive.number).
    return (math.isclose(current.share, new.share, rel_tol=1e-5, abs_tol=1e-9)
            and math.isclose(current.ceiling, new.ceiling, rel_tol=1e-5, abs_tol=1e-9)
            and current.shed_at_once == new.shed_at_once and current.fleet == new.fleet
            and current.successors == new.successors)


def members_of(alive: Sequence[SessionItem]) -> list[Member]:
    """The decider's view of each live session; a worker that reports no load (a version
    before weights) carries its stream count."""
    return [Member(i.owner, i.load if i.load is not None else float(i.held), i.held,
                   i.capacity, i.draining, i.version, i.started_at_ms) for i in alive]


@dataclass
class Balancer:
    """The decider's state between sweeps (kept in ``SweepDeps``: a warm Lambda keeps it)."""

    settings: Settings
    next_ms: int = 0
    # The members draining at the last decision: one that begins draining (``holdfast drain``,
    # or a worker's own stop, ``worker.stopping``) is decided for at once, not up to an interval
    # later: a SIGTERMed worker waits for its successors, and its stop budget runs meanwhile.
    draining: frozenset[str] = frozenset()

    @property
    def policy(self) -> BalancePolicy:
        s = self.settings
        return BalancePolicy(band_fraction=s.balance_band, band_min=s.balance_band_min,
                             motion_fraction=s.balance_motion)

    def step(self, sessions: SessionStore, sqs: SQSClient, alive: Sequence[SessionItem], *,
             unowned: int, now_ms: int, logger: SweepLog = log,
             count: Callable[[str], int] | None = None) -> BalanceRound | None:
        """Decide if due (None: not due, turned off, or no live session) and write targets.

        ``count(owner)`` gives how many streams an owner holds now (the owner index): asked
        only when the reports say the fleet is out of balance, so the decision stands on what
        each worker holds, not on loads a heartbeat old that count a moving stream twice or
        not at all.
        """
        s = self.settings
        draining = frozenset(i.owner for i in alive if i.draining)
        if not s.balance or (now_ms < self.next_ms and draining <= self.draining):
            return None
        self.next_ms, self.draining = now_ms + s.balance_interval_ms, draining
        members = members_of(alive)
        if not members:
            return None
        decision = place(members, unowned=unowned, in_motion=unowned, policy=self.policy)
        if not decision.balanced and count is not None:
            decision = self._recount(members, unowned, count, logger) or decision
        current = {i.owner: i.directive for i in alive}
        if decision.balanced:
            return self._lapse(sessions, sqs, decision, current=current, now_ms=now_ms,
                               fleet=len(members), logger=logger)
        until = now_ms + s.balance_target_ttl_ms
        written = sent = 0
        try:
            for target in decision.targets:
                directive = Directive(target.share, target.ceiling, target.shed_at_once,
                                      until_ms=until, fleet=len(members), issued_ms=now_ms,
                                      successors=target.successors)
                if same_target(current.get(target.owner), directive, now_ms,
                               s.balance_target_ttl_ms):
                    continue
                if not _set(sessions, target.owner, directive, logger):
                    continue  # ended or replaced since the scan: nothing to tell it
                written += 1
                sent += self._send(sqs, target.owner, directive, logger)
        except (HoldfastError, BotoCoreError, ClientError) as exc:
            logger.error("rebalance round skipped after %d targets: %s", written, exc,
                         extra={"written": written, "error": str(exc)[:300]})
            return BalanceRound(decision.excess, False, written, sent, failed=True)
        if written:
            logger.info(summary(decision, members, unowned, written),
                        extra={"excess": decision.excess, "budget": decision.budget,
                               "workers": len(members), "unowned": unowned,
                               "written": written})
        return BalanceRound(decision.excess, False, written, sent)

    def _recount(self, members: Sequence[Member], unowned: int, count: Callable[[str], int],
                 logger: SweepLog) -> Plan | None:
        """The plan again from what each member holds now (weights: at its reported mean
        weight); None if a count failed (the reports' plan stands)."""
        try:
            held = {m.owner: count(m.owner) for m in members}
        except (HoldfastError, BotoCoreError, ClientError) as exc:
            logger.error("cannot count the streams each worker holds: %s", exc,
                         extra={"error": str(exc)[:300]})
            return None
        fresh = [dataclasses.replace(m, held=held[m.owner], load=held[m.owner] * (
            m.load / m.held if m.held else 1.0)) for m in members]
        return place(fresh, unowned=unowned, in_motion=unowned, policy=self.policy)

    def _lapse(self, sessions: SessionStore, sqs: SQSClient, decision: Plan, *,
               current: Mapping[str, Directive | None], now_ms: int, fleet: int,
               logger: SweepLog) -> BalanceRound:
        """Balanced: end every target still live now (until = issued = now)."""
        written = sent = 0
        try:
            for owner, d in current.items():
                if d is None or not d.live(now_ms):
                    continue
                lapse = Directive(d.share, d.ceiling, 0, until_ms=now_ms, fleet=fleet,
                                  issued_ms=now_ms)
                if _set(sessions, owner, lapse, logger):
                    written += 1
                    sent += self._send(sqs, owner, lapse, logger)
        except (HoldfastError, BotoCoreError, ClientError) as exc:
            # They lapse by themselves at their until_ms; the next round tries again.
            logger.error("lapsing rebalance targets failed after %d: %s", written, exc,
                         extra={"written": written, "error": str(exc)[:300]})
            return BalanceRound(decision.excess, True, written, sent, failed=True)
        if written:
            logger.info("rebalance: balanced, %d targets lapsed", written,
                        extra={"lapsed": written, "workers": fleet})
        return BalanceRound(decision.excess, True, written, sent)

    def _send(self, sqs: SQSClient, owner: str, directive: Directive,
              logger: SweepLog) -> int:
        prefix = self.settings.orders_queue_prefix
        if prefix is None:
            return 0  # the session item alone: the worker reads it with its next heartbeat
        result, detail = send_body(sqs, self.settings.queue_url, prefix, owner,
                                   directive.body(owner))
        if result == "order_queue_failed":
            logger.error("rebalance target not queued for %s: %s", owner, detail,
                         extra={"owner": owner, "detail": detail})
        elif result == "order_queue_missing":
            logger.info("rebalance target not queued for %s: no order queue", owner,
                        extra={"owner": owner, "detail": detail})
        return 1 if result == "order_queue_sent" else 0


def _set(sessions: SessionStore, owner: str, directive: Directive, logger: SweepLog) -> bool:
    """``set_directive``; an invalid write is that session's alone (logged, False)."""
    try:
        return sessions.set_directive(owner, directive)
    except InvalidRequest as bad:
        logger.error("rebalance target refused for %s: %s", owner[:_OWNER_CHARS], bad,
                     extra={"owner": owner[:200], "error": str(bad)[:300]})
        return False


def summary(decision: Plan, members: Sequence[Member], unowned: int, written: int) -> str:
    """One bounded log line: the excess, the budget, and the members furthest from their
    share as ``owner load->share`` (at most ``SUMMARY_MEMBERS`` of them)."""
    far = sorted(members, key=lambda m: (-abs(m.load - decision.shares[m.owner]), m.owner))
    shown = ", ".join(f"{m.owner[:_OWNER_CHARS]} {m.load:g}->{decision.shares[m.owner]:g}"
                      + (" (draining)" if m.draining else "") for m in far[:SUMMARY_MEMBERS])
    more = f", +{len(far) - SUMMARY_MEMBERS} more" if len(far) > SUMMARY_MEMBERS else ""
    if decision.deploying is not None:
        old = sum(1 for m in members if m.version != decision.deploying)
        named = {t.owner: t.successors for t in decision.targets}
        shown = ", ".join(
            f"{m.owner[:_OWNER_CHARS]} {m.load:g}" + (" (new)" if m.version == decision.deploying
                                                      else f" -> {dict(named[m.owner])}")
            for m in members[:SUMMARY_MEMBERS])
        return (f"deploy of {decision.deploying[:_OWNER_CHARS]!r} under way: {old} of "
                f"{len(members)} workers on an older version keep their streams until they "
                f"stop, then hand them to the new ones; {written} targets written: {shown}")
    return (f"rebalance: {decision.excess:g} streams above fair share across {len(members)} "
            f"workers ({unowned} unowned, {decision.budget} may move now), {written} targets "
            f"written: {shown}{more}")
