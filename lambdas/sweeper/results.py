"""What a sweep did (``SweepResult``), the totals of many (``SweepStats``: the Lambda's metrics
and the local runner's summary), and the log lines of one."""

from __future__ import annotations

from dataclasses import dataclass, field

from holdfast.core.liveness import AuditResult
from holdfast.core.nudge import Nudge
from holdfast.core.sessions import SweepLog
from holdfast.core.table import Orphan
from holdfast.lambdas.sweeper.balancer import BalanceRound

__all__ = ["SweepResult", "SweepStats", "log_result"]


@dataclass
class SweepResult:
    """One sweep: what was due, what was nudged, and when the next lease becomes claimable."""

    due: list[Orphan]
    nudged: list[Nudge]
    failed: list[tuple[Nudge, str]]
    next_due_ms: int | None
    complete: bool
    oldest_age_ms: int = 0
    dead: list[str] = field(default_factory=list)  # owners declared dead by this sweep
    reaped: int = 0  # streams released from dead or ended sessions
    malformed_sessions: int = 0
    normalised: int = 0  # items the index could not see, given an expiry by this sweep
    balance: BalanceRound | None = None  # None: no rebalancing decision this sweep
    audit: AuditResult | None = None  # None: no owner audit this sweep
    item_errors: int = 0  # streams a release or audit could not write (retried next sweep)
    step_errors: int = 0  # steps before the orphans' query that failed (skipped this sweep)


@dataclass
class SweepStats:
    sweeps: int = 0
    errors: int = 0
    nudged: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    oldest_age_ms: int = 0
    dead_sessions: int = 0
    reaped: int = 0
    malformed_sessions: int = 0
    normalised: int = 0
    balance_rounds: int = 0
    balance_targets: int = 0  # rebalancing targets written
    imbalance: float = 0.0  # the largest excess a decision saw (load above the fair shares)
    item_errors: int = 0
    stranded_released: int = 0  # streams of non-live owners released by the owner audit
    stranded: int = 0  # owned by a non-live session, not yet released, at the last audit
    oldest_stranded_ms: int = 0
    # The longest one sweep took, failed or not (``run_sweeps``): a run starts no sweep that,
    # as long, would end past its time (``handler.sweep_for``).
    longest_ms: int = 0

    def add(self, result: SweepResult) -> None:
        self.sweeps += 1
        if result.balance is not None:
            self.balance_rounds += 1
            self.balance_targets += result.balance.written
            self.imbalance = max(self.imbalance, result.balance.imbalance)
        self.normalised += result.normalised
        self.dead_sessions += len(result.dead)
        self.reaped += result.reaped
        self.malformed_sessions += result.malformed_sessions
        self.item_errors += result.item_errors
        self.errors += result.step_errors
        if result.audit is not None:
            self.stranded_released += len(result.audit.released)
            self.stranded = result.audit.stranded
            self.oldest_stranded_ms = max(self.oldest_stranded_ms,
                                          result.audit.oldest_stranded_ms)
        for nudge in result.nudged:
            self.nudged[nudge.reason] = self.nudged.get(nudge.reason, 0) + 1
        self.failed += len(result.failed)
        self.oldest_age_ms = max(self.oldest_age_ms, result.oldest_age_ms)


def log_result(logger: SweepLog, result: SweepResult) -> None:
    """Log what one sweep released, nudged and could not."""
    if result.audit is not None:
        for conn_id, owner, why in result.audit.released:
            logger.info("released %s: owner %s is not a live session (%s)", conn_id, owner,
                        why, extra={"conn_id": conn_id, "owner": owner, "why": why})
        for conn_id, error in result.audit.errors:
            logger.error("owner audit cannot release %s: %s", conn_id, error,
                         extra={"conn_id": conn_id, "error": error})
    for nudge in result.nudged:
        logger.info("sweeper nudged %s (%s)", nudge.conn_id, nudge.reason,
                    extra={"conn_id": nudge.conn_id, "reason": nudge.reason})
    for nudge, error in result.failed:
        logger.error("sweeper could not nudge %s: %s", nudge.conn_id, error,
                     extra={"conn_id": nudge.conn_id, "error": error})
