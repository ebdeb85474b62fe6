"""The router's one write to a lease item: its expiry, never its ownership (``infra/router.py``
pins its IAM role to the key, ``desired_state`` and the expiry).

``LeaseStore.normalise`` gives an item without ``lease_expires_at_ms`` the value 0, so the
sweeper's index sees it, and holds a stream written over out of claims until its holder
takes it back (``core.overwrites``, the decision's ``hold_until_ms``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from holdfast.core.aws import InvalidRequest
from holdfast.core.exceptions import HoldfastError
from holdfast.core.store import LeaseStore
from holdfast.lambdas.router.decision import Decision

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

__all__ = ["write_expiries"]


def write_expiries(decisions: Mapping[str, Decision], failed: Mapping[str, str],
                   store: LeaseStore, *, logger: Logger,
                   out_of_time: Callable[[], bool]) -> tuple[Counter[str], dict[str, str]]:
    """Normalise or hold each item its decisions ask for, once per stream, skipping records
    already ``failed``; (counts, failures by sequence number: records Lambda retries)."""
    counts: Counter[str] = Counter()
    failures: dict[str, str] = {}
    # One write per stream, the latest hold its records ask for (a hold also normalises):
    # a batch that inserted a stream and wrote over its holding holds it.
    asked: dict[str, list[str]] = {}
    holds: dict[str, int] = {}
    for seq, decision in decisions.items():
        conn_id, hold = decision.conn_id, decision.hold_until_ms
        if (decision.normalise or hold is not None) and conn_id is not None and (
                seq not in failed):
            asked.setdefault(conn_id, []).append(seq)
            if hold is not None:
                holds[conn_id] = max(hold, holds.get(conn_id, 0))
    for conn_id, seqs in asked.items():
        hold = holds.get(conn_id)
        if out_of_time():
            failures.update(dict.fromkeys(seqs, "out of time before its normalisation"))
            continue
        try:
            changed = store.normalise(conn_id, hold or 0)
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
        if hold is not None:  # not a normalisation: no worker claims it before ``hold``
            logger.info("held for its holder's take-back", conn_id=conn_id, until_ms=hold,
                        changed=changed)
            continue
        counts["normalised"] += int(changed)
        logger.info("normalised", conn_id=conn_id, changed=changed)
    return counts, failures
