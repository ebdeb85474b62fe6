"""The reconcile sweep: the claimer's safety net for a router or sweeper that is down.

Every jittered ``period_s`` it runs the session half of the sweeper (declare silent sessions
dead, release their streams) and tries to claim the orphans the seed index shows that fit in
this worker's capacity. It also tells the rebalancing side how many live sessions it saw
(``fleet``: this worker's share of the fleet's reconnect budget).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from holdfast.core.aws import recently_throttled
from holdfast.core.exceptions import HoldfastError
from holdfast.core.sessions import SessionStore, sweep_sessions
from holdfast.core.table import Orphan, find_orphans
from holdfast.worker.backoff import jittered
from holdfast.worker.claims import Claim, ClaimFn
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["STRAY_SCAN_S", "Reconciler", "Strays"]

# How often a worker looks for streams its own session owns but it does not hold: one owner
# index Query (keys only, usually half a read unit) per worker per pass.
STRAY_SCAN_S = 5.0

logger = Logger(service=WORKER_LOGGER, child=True)


async def _every(period_s: float, once: Callable[[], Awaitable[int]], failed: str, *,
                 sleep: Callable[[float], Awaitable[None]], rand: Callable[[], float],
                 throttled: Callable[[], bool]) -> None:
    """Run ``once`` every jittered ``period_s`` until cancelled; a failed pass is logged. A
    pass due while the table throttles (``throttled``) is skipped: a safety net's reads can
    wait a period, and on a table refusing calls they would only add to them. Never two in a
    row: a table throttled now and then for hours must not strand a stray that long."""
    skipped = False
    while True:
        await sleep(jittered(period_s, rand))
        if not skipped and throttled():
            skipped = True
            continue
        skipped = False
        try:
            await once()
        except HoldfastError as exc:  # InvalidRequest too: one bad item never stops it
            logger.warning(failed, error=str(exc)[:300])


@dataclass
class Reconciler:
    """The fallback sweep: every jittered ``period_s``, claim orphans that fit in capacity."""

    ddb: DynamoDBClient
    table: str
    skew_ms: int
    claim: ClaimFn
    free_capacity: Callable[[], int]
    period_s: float
    wall_ms: Callable[[], int]
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    # The session half of the sweeper, as a safety net for a sweeper that is down: declare
    # silent sessions dead and release their streams (the router then nudges them).
    sessions: SessionStore | None = None
    # Told how many live sessions the sweep saw (this worker's share of the connect budget).
    fleet: Callable[[int], None] | None = None
    # Told how many silent sessions it declared dead: counted (DeadSessions) as the sweeper's
    # and the task-stopped report's are, or a death a worker's sweep declared first paged nobody.
    declared_dead: Callable[[int], None] | None = None
    throttled: Callable[[], bool] = recently_throttled

    async def run(self) -> None:
        await _every(self.period_s, self.sweep, "reconcile sweep failed", sleep=self.sleep,
                     rand=self.rand, throttled=self.throttled)

    async def sweep(self) -> int:
        """One pass; returns how many streams it claimed."""
        if self.sessions is not None:
            swept = await on_io_threads(sweep_sessions, self.sessions, self.wall_ms(),
                                            self.skew_ms, logger)
            if swept.dead or swept.reaped:
                logger.info("reconcile sweep reaped sessions", dead=len(swept.dead),
                            released=swept.reaped)
            if self.declared_dead is not None and swept.dead:
                self.declared_dead(len(swept.dead))
            if self.fleet is not None and swept.alive:
                self.fleet(len(swept.alive))
        free = self.free_capacity()
        if free <= 0:
            return 0
        # Read a little more than fits: other workers race for the same orphans. An entry
        # no stream could have is the sweeper's to report (``find_orphans``).
        orphans = await on_io_threads(lambda: [o.conn_id for o in itertools.islice(
            (o for o in find_orphans(self.ddb, self.table, now_ms=self.wall_ms(),
                                     skew_ms=self.skew_ms) if isinstance(o, Orphan)),
            free * 2)])
        random.shuffle(orphans)  # workers sweeping at once should not all fight for the first
        claimed = 0
        for conn_id in orphans:
            if self.free_capacity() <= 0:
                break
            if await self.claim(conn_id, "sweep") is Claim.CLAIMED:
                claimed += 1
        if claimed:
            logger.info("reconcile sweep claimed orphans", claimed=claimed, seen=len(orphans))
        return claimed


@dataclass
class Strays:
    """Streams our own session owns but no connection of ours holds: taken back.

    How one gets there: an acquire whose answer was lost and whose re-read failed, a release
    that gave up (DynamoDB unavailable), a fenced stream's best-effort release. Nobody else may
    free them while our session lives (only the holder or the reaper of a dead session does),
    so we do: every ``period_s`` the owner index is asked what we own, and each stray is
    claimed again (the acquire takes back our own stream under a new epoch; a STOPPED one is
    released). The index is eventually consistent: a stream we released a moment ago may still
    show, and its claim simply fails.
    """

    sessions: SessionStore
    owner: Callable[[], str | None]
    claim: ClaimFn
    busy: Callable[[], set[str]]
    # Hands back a stray we will not hold (full, or shed): nobody else may free it.
    release: Callable[[str, str], Awaitable[bool]]
    period_s: float = STRAY_SCAN_S
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    throttled: Callable[[], bool] = recently_throttled

    async def run(self) -> None:
        await _every(self.period_s, self.once, "stray scan failed", sleep=self.sleep,
                     rand=self.rand, throttled=self.throttled)

    async def once(self) -> int:
        """One pass; returns how many strays it claimed back."""
        owner = self.owner()
        if owner is None:
            return 0
        owned = await on_io_threads(self.sessions.owned_by, owner)
        busy = self.busy()  # once: per owned stream it was O(n^2), seconds at 5,000 streams
        strays = [c for c in owned if c not in busy]
        taken = released = 0
        for conn_id in strays:
            if self.owner() != owner:
                break
            outcome = await self.claim(conn_id, "stray")
            if outcome is Claim.CLAIMED:
                taken += 1
            elif outcome in (Claim.NO_CAPACITY, Claim.REFUSED):
                released += await self.release(conn_id, owner)
        if strays:
            logger.info("strays of our own session", found=len(strays), claimed=taken,
                        released=released)
        return taken
