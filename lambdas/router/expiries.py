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
    """Normalise or hold each item its decision asks for, once per stream, skipping records
    already ``failed``; (counts, failures by sequence number: records Lambda retries)."""
    counts: Counter[str] = Counter()
    failures: dict[str, str] = {}
    done: set[str] = set()
    for seq, decision in decisions.items():
        hold = decision.hold_until_ms
        if ((not decision.normalise and hold is None) or decision.conn_id is None
                or seq in failed or decision.conn_id in done):
            continue
        if out_of_time():
            failures[seq] = "out of time before its normalisation"  # retried alone
            continue
        try:
            changed = store.normalise(decision.conn_id, hold or 0)
        except InvalidRequest as exc:
            # The item's own fault (too big to take an expiry): retrying the record would
            # hold the shard for nothing; the sweeper's unindexed pass logs it too.
            logger.error("cannot normalise: the item is refused", conn_id=decision.conn_id,
                         error=exc.message[:300])
            counts["normalise_refused"] += 1
            continue
        except HoldfastError as exc:
            # Until it has an expiry the sweeper cannot see it: retry the record.
            logger.error("normalise failed", conn_id=decision.conn_id, error=str(exc))
            failures[seq] = f"normalise failed: {exc}"
            continue
        done.add(decision.conn_id)
        if hold is not None:  # not a normalisation: no worker claims it before ``hold``
            logger.info("held for its holder's take-back", conn_id=decision.conn_id,
                        until_ms=hold, changed=changed)
            continue
        counts["normalised"] += int(changed)
        logger.info("normalised", conn_id=decision.conn_id, changed=changed)
    return counts, failures
