"""The slow pass for items the index cannot see: STARTED without ``lease_expires_at_ms``.

The seed's index is sparse: an item inserted without an expiry is invisible to the orphan query
until the router normalises it (``lease_expires_at_ms = 0``). If that router record failed (it
went to the on-failure queue, or the mapping was disabled), nothing would ever claim the stream.
So the sweeper scans the table for such items, one page per sweep so the one-second cadence
holds, one full pass every ``unindexed_scan_ms``, and normalises what it finds; the next orphan
query sees those items at expiry 0 and nudges them after the unclaimed grace, as usual.

A pass reads every item once: at 100,000 half-kilobyte items an estimated 6,000 read units
(arithmetic, not measured), so the default (a pass every 5 minutes) costs about $0.20 a day at
that size, and ~nothing at demo size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from holdfast.core.aws import InvalidRequest
from holdfast.core.table import find_unindexed

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["UnindexedPass"]

log = logging.getLogger(__name__)


@dataclass
class UnindexedPass:
    """Where the current pass is: the next page's start key, and when the next pass begins."""

    period_ms: int
    next_pass_ms: int = 0  # the first sweep of a process starts a pass
    start_key: dict[str, Any] | None = None
    in_pass: bool = False
    refused: int = 0  # items DynamoDB refused to normalise in the last step (``ItemErrors``)

    def step(self, ddb: DynamoDBClient, table: str, now_ms: int,
             normalise: Callable[[str], bool]) -> int:
        """One page of the pass if one is due; normalises what it finds. Returns how many it
        fixed. DynamoDB errors propagate (the sweep loop backs off); the pass resumes where it
        was."""
        self.refused = 0
        if self.period_ms <= 0 or not (self.in_pass or now_ms >= self.next_pass_ms):
            return 0
        found, next_key = find_unindexed(ddb, table, start_key=self.start_key)
        fixed = 0
        for conn_id in found:
            # Conditional on the expiry still missing: a router that got there first wins.
            try:
                changed = normalise(conn_id)
            except InvalidRequest as exc:
                # That item's own fault (too big to take an expiry): logged, and the pass goes
                # on; raised, it failed the same page on every sweep and hid the items after.
                log.error("cannot normalise %s (the sweeper cannot see it until its item is "
                          "fixed): %s", conn_id, exc.message[:300],
                          extra={"conn_id": conn_id})
                self.refused += 1
                continue
            if changed:
                fixed += 1
                log.warning("normalised an item the index could not see (its router record "
                            "was lost?): %s", conn_id, extra={"conn_id": conn_id})
        # Continue from next_key, or end the pass and schedule the next.
        self.start_key, self.in_pass = next_key, next_key is not None
        if next_key is None:
            self.next_pass_ms = now_ms + self.period_ms
        return fixed
