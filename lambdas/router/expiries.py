"""The router's one write to a lease item: its expiry, never its ownership (``infra/router.py``
pins its IAM role to the key, ``desired_state``, the expiry and, for a condition, ``status``).

``LeaseStore.normalise`` gives an item without ``lease_expires_at_ms`` the value 0, so the
sweeper's index sees it, and holds a stream written over out of claims until its holder
takes it back (``core.overwrites``, the decision's ``hold_until_ms``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from holdfast.core.aws import InvalidRequest
from holdfast.core.exceptions import HoldfastError
from holdfast.core.store import LeaseStore
from holdfast.lambdas.router.decision import Decision

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

__all__ = ["ExpiryTarget", "expiry_targets", "write_expiries"]


@dataclass(frozen=True, slots=True)
class ExpiryTarget:
    """One stream's expiry write: the records that asked for it, and the hold (None: only
    normalised)."""

    seqs: list[str]
    hold: int | None


def expiry_targets(decisions: Mapping[str, Decision],
                   by_holder: Mapping[str, bool]) -> dict[str, ExpiryTarget]:
    """What each stream's records ask for, in their order: the latest hold (a hold also
    normalises; a batch that inserted a stream and wrote over its holding holds it), void
    once a later record is a write of the protocol (``by_holder``: its new image names an
    owner or a status: a take-back, a claim, a release), whose writer acted already."""
    seqs: dict[str, list[str]] = {}
    holds: dict[str, int] = {}
    for seq, decision in decisions.items():
        conn_id, hold = decision.conn_id, decision.hold_until_ms
        if conn_id is None:
            continue
        if by_holder.get(seq):
            holds.pop(conn_id, None)
        if decision.normalise or hold is not None:
            seqs.setdefault(conn_id, []).append(seq)
            if hold is not None:
                holds[conn_id] = max(hold, holds.get(conn_id, 0))
    return {conn_id: ExpiryTarget(asked, holds.get(conn_id)) for conn_id, asked in seqs.items()}


def write_expiries(targets: Mapping[str, ExpiryTarget], failed: Mapping[str, str],
                   store: LeaseStore, *, holds: bool, logger: Logger,
                   out_of_time: Callable[[], bool]) -> tuple[Counter[str], dict[str, str]]:
    """Write the holds (``holds``), or the plain normalisations, of ``targets``, leaving out
    records already ``failed``; (counts, failures by sequence number: records Lambda
    retries). A hold refused (a write of the protocol came since, or the app's write kept a
    ``status``) still normalises."""
    counts: Counter[str] = Counter()
    failures: dict[str, str] = {}
    for conn_id, target in targets.items():
        seqs = [seq for seq in target.seqs if seq not in failed]
        if not seqs or (target.hold is not None) != holds:
            continue
        if out_of_time():
            failures.update(dict.fromkeys(seqs, "out of time before its normalisation"))
            continue
        try:
            changed = store.normalise(conn_id, target.hold or 0)
            if target.hold is not None and not changed:
                changed = store.normalise(conn_id)
        except InvalidRequest as exc:
            # The item's own fault (too big to take an expiry): retrying the record would
            # hold the shard for nothing; the sweeper's unindexed pass logs it too.
            logger.error("cannot normalise: the item is refused", conn_id=conn_id,
                         error=exc.message[:300])
            counts["normalise_refused"] += 1
            continue
        except HoldfastError as exc:
            # Until it has an expiry the sweeper cannot see it: retry the record.
            logger.error("normalise failed", conn_id=conn_id, error=str(exc))
            failures.update(dict.fromkeys(seqs, f"normalise failed: {exc}"))
            continue
        if target.hold is not None:  # not a normalisation: no worker claims it before
            logger.info("held for its holder's take-back", conn_id=conn_id,
                        until_ms=target.hold, changed=changed)
            continue
        counts["normalised"] += int(changed)
        logger.info("normalised", conn_id=conn_id, changed=changed)
    return counts, failures
