"""The router's side of a restart with an old owner named: is that owner's session still live?

``decide`` cannot know (liveness is in the session table), so it answers ``CHECK_OWNER`` and
the handler calls :func:`check_owner` with the session store (also for an order that found no
live session to take it). The verdict itself is the pure ``holdfast.core.liveness
.owner_liveness``; this module only reads the session and, for a session nobody serves
any more, releases the stream with ``SessionStore.release_owned`` (conditional on that owner,
the very write the sweeper's reap makes). The release's own stream record is what gets the
stream nudged ("released"), so nothing is nudged from here.

The router never marks a session dead: a session that is ALIVE but silent is left to the
sweeper, which declares it dead and reaps its streams within one sweep.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from holdfast.core.exceptions import HoldfastError, MalformedItem
from holdfast.core.liveness import Liveness, owner_liveness, session_owner
from lambdas.router.decide import Decision, Outcome

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

    from holdfast.core.sessions import SessionStore

__all__ = ["OwnerCheck", "check_owner", "check_owners"]


@dataclass(frozen=True, slots=True)
class OwnerCheck:
    """What came of one owner check: ``result`` is the counter key, ``detail`` says why."""

    result: str  # owner_live | owner_silent | owner_released | owner_release_raced | ...
    detail: str


def check_owner(sessions: SessionStore, conn_id: str, owner: str, now_ms: int,
                skew_ms: int) -> OwnerCheck:
    """Keep the stream with a live owner, release it from a gone one; may raise
    ``StoreUnavailable`` (the caller retries the record)."""
    parsed = session_owner(owner)
    if parsed is None:  # no session can hold it: the sweeper's owner audit frees it in time
        return OwnerCheck("owner_unknown", "not a session owner")
    try:
        session = sessions.get(parsed[0])
    except MalformedItem as bad:
        # Cannot tell whether it heartbeats: leave the stream; the sweeper reports the item.
        return OwnerCheck("owner_unchecked", f"session item malformed: {bad.reason}"[:300])
    verdict, why = owner_liveness(owner, session, now_ms, skew_ms)
    if verdict is Liveness.LIVE:
        return OwnerCheck("owner_live", why)
    if verdict is Liveness.SILENT:
        return OwnerCheck("owner_silent", why)
    if verdict is Liveness.UNKNOWN:  # its holder may still be fencing itself: the audit waits
        return OwnerCheck("owner_unknown", why)
    released = sessions.release_owned(conn_id, owner, f"restarted; owner {owner}: {why}")
    return OwnerCheck("owner_released" if released else "owner_release_raced", why)


def check_owners(decisions: Mapping[str, Decision], sessions: SessionStore | None, now_ms: int,
                 skew_ms: int, logger: Logger) -> tuple[Counter[str], dict[str, str]]:
    """Check every CHECK_OWNER decision of a batch (each stream and owner once); returns the
    counts by result and the failed records (sequence number -> why) for Lambda to retry."""
    counts: Counter[str] = Counter()
    failures: dict[str, str] = {}
    done: set[tuple[str, str]] = set()
    for seq, decision in decisions.items():
        conn_id, owner = decision.conn_id, decision.owner
        if decision.outcome is not Outcome.CHECK_OWNER or conn_id is None or owner is None:
            continue
        if sessions is None:
            counts["owner_unchecked"] += 1
            logger.warning("owner not checked: no session table", conn_id=conn_id,
                           owner=owner)
            continue
        if (conn_id, owner) in done:
            continue
        try:
            checked = check_owner(sessions, conn_id, owner, now_ms, skew_ms)
        except HoldfastError as exc:
            # Nobody else frees the stream of a session that is already gone: retry it.
            logger.error("owner check failed", conn_id=conn_id, owner=owner,
                         error=str(exc)[:300])
            failures[seq] = f"owner check failed: {exc}"
            continue
        done.add((conn_id, owner))
        counts[checked.result] += 1
        logger.info("owner checked", conn_id=conn_id, owner=owner, result=checked.result,
                    detail=checked.detail, epoch=decision.epoch)
    return counts, failures
