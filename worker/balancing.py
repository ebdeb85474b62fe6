"""This worker's side of rebalancing: its target, draining, shedding and the claim gate.

The decider (the sweeper, ``lambdas.sweeper.balancer``) writes a target into our session
item while the fleet is out of balance and sends the same to our order queue; ``holdfast
drain`` sets the drain flag the same two ways (``holdfast.core.directives``). ``update`` takes
either. From there everything is local:

- **shedding**: ``pick_sheds`` (``holdfast.core.balance``) names the streams to hand on, at
  most ``shed_at_once`` at a time, none whose owner changed within the cool-down (unless
  draining). Each is drained like a stop: the handler call in flight finishes, the
  connection closes, the release writes the final checkpoint and ``moved_at_ms``; the router
  nudges it at once and an under-loaded worker resumes it from ``last_seq + 1``. The next one
  starts once another worker owns it (``moved``: the item is read back every 200 ms).
- **the claim gate**: while a target is live and we are at its ceiling (our share when we
  are over it, share + band when under), a moved stream's nudge (the router's reason
  ``moved``) is handed on to another worker; a failover's or a new stream's nudge is claimed
  as ever, so none waits for a decision. A stream we shed within the cool-down is never
  claimed back as a move (a failover's nudge for it we claim). Draining claims nothing.
- **decider down**: targets lapse (``until_ms``) and the gate opens; nothing else depends on
  the decider. Draining goes on without one, ``HOLDFAST_DRAIN_AT_ONCE`` at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.core.aws import recently_throttled
from holdfast.core.balance import HeldView, pick_sheds
from holdfast.core.directives import Directive
from holdfast.core.schema import ATTR, STARTED
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.metrics import WorkerMetrics
from holdfast.worker.successors import ASK_WAIT_MS, Successors

if TYPE_CHECKING:
    from holdfast.core.store import LeaseStore
    from holdfast.worker.budget import ConnectBudget
    from holdfast.worker.connection import Connection

__all__ = ["HANDOFF", "SHED", "Balancing", "owned_elsewhere_by"]

logger = Logger(service=WORKER_LOGGER, child=True)
SHED = "shed"  # the drain reason of a stream handed on by rebalancing or draining
HANDOFF = "handoff"  # the drain reason of a stream whose successor has warmed up
_STEP_S = 0.5  # look again this often even without news (cool-downs end, sheds land)
# A stream we shed is refused for at least this long, even with no cool-down configured.
_REFUSE_MIN_MS = 10_000
# A shed stream keeps its slot until another worker owns it (checked this often), so
# ``shed_at_once`` bounds what is in motion, not only what is being released; after the
# longest wait the slot is free anyway (the decider's count of unowned streams still bounds).
_FOLLOW_S = 0.2
_FOLLOW_MAX_S = 5.0


class Balancing:
    """Rebalancing state of one worker; the supervisor runs ``run`` as a service loop."""

    def __init__(self, streams: dict[str, Connection], *, cooldown_ms: int, drain_at_once: int,
                 wall: Callable[[], int], mono: Callable[[], int], metrics: WorkerMetrics,
                 budget: ConnectBudget | None = None,
                 owned_elsewhere: Callable[[str], Awaitable[bool]] | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 offer: Callable[[Connection, str, str], bool] | None = None,
                 throttled: Callable[[], bool] | None = None) -> None:
        self.streams = streams
        # No shed for balance while DynamoDB refuses our calls (a drain goes on): a move is
        # writes (a transfer or a release, then a claim) on a table already refusing them; the
        # soak saw a rebalance in a throttle window lift the call rate past twice normal.
        self.throttled = throttled or recently_throttled
        self.cooldown_ms, self.drain_at_once = cooldown_ms, drain_at_once
        self.wall, self.mono = wall, mono
        self.metrics, self.budget = metrics, budget
        self.directive: Directive | None = None
        self.draining = False
        self._drain_from: int | None = None  # mono ms the drain flag arrived
        self._claimed_at: dict[str, int] = {}  # conn_id -> wall ms we claimed it
        self._refuse: dict[str, int] = {}  # conn_id -> mono ms until which we do not take it
        self._wake = asyncio.Event()
        self.owned_elsewhere, self.sleep = owned_elsewhere, sleep
        self._moving: set[str] = set()  # released by a shed, not yet owned again
        self.successors = Successors(live=self.live_directive, mono=mono)
        self._follows: set[asyncio.Task[None]] = set()
        # Make-before-break (``worker.handoff``): start a warm handoff instead of a drain.
        self.offer = offer
        self._offered: set[str] = set()  # sheds offered warm, still delivering

    # -- news -----------------------------------------------------------------------------
    def update(self, directive: Directive | None = None, draining: bool | None = None, *,
               via: str = "session") -> None:
        """A directive and/or drain flag arrived (``via`` the session item or the queue)."""
        if directive is not None and (self.directive is None
                                      or directive.issued_ms >= self.directive.issued_ms):
            changed = directive != self.directive
            self.directive = directive
            self.successors.newer(directive, self.wall())
            if self.budget is not None and directive.fleet > 0:
                self.budget.set_fleet(directive.fleet)
            if changed and directive.live(self.wall()):
                logger.info("rebalancing target", share=directive.share,
                            ceiling=directive.ceiling, shed_at_once=directive.shed_at_once,
                            load=self.load(), via=via)
        if draining is not None and draining != self.draining:
            self.draining = draining
            self._drain_from = self.mono() if draining else None
            logger.info("draining" if draining else "draining cancelled", held=len(self.streams),
                        via=via)
        self._wake.set()

    def news(self, news: Directive | bool) -> None:
        """A target or drain flag from the order queue (the session item says it too)."""
        if isinstance(news, bool):
            self.update(draining=news, via="queue")
        else:
            self.update(news, via="queue")

    def claimed(self, conn_id: str) -> None:
        self._claimed_at[conn_id] = self.wall()

    def moved(self, conn_id: str) -> None:
        """A shed stream's release is written: it is in motion until someone owns it."""
        if self.owned_elsewhere is None:
            return
        self._moving.add(conn_id)
        task = asyncio.get_running_loop().create_task(self._follow(conn_id))
        self._follows.add(task)
        task.add_done_callback(self._follows.discard)

    async def _follow(self, conn_id: str) -> None:
        assert self.owned_elsewhere is not None
        try:
            for _ in range(round(_FOLLOW_MAX_S / _FOLLOW_S)):
                await self.sleep(_FOLLOW_S)
                try:
                    if await self.owned_elsewhere(conn_id):
                        return
                except Exception as exc:  # a failed read only ends the wait
                    logger.debug("cannot follow a shed stream", conn_id=conn_id,
                                 error=str(exc)[:200])
                    return
        finally:
            self._moving.discard(conn_id)
            self._wake.set()

    def finished(self, conn_id: str) -> None:
        """A stream's release is written (or given up): a shed slot is free again."""
        self._claimed_at.pop(conn_id, None)
        self._offered.discard(conn_id)
        self._wake.set()

    # -- questions ----------------------------------------------------------------------
    def load(self) -> float:
        """The sum of the weights of the streams we hold (= their number by default)."""
        return sum(c.held.lease.weight for c in self.streams.values())

    def live_directive(self) -> Directive | None:
        d = self.directive
        return d if d is not None and d.live(self.wall()) else None

    def room(self) -> int | None:
        """How many more streams the gate lets us claim (None: no limit but capacity)."""
        if self.draining:
            return 0
        d = self.live_directive()
        if d is None:
            return None
        # Whole streams that fit under the ceiling: a claim never takes us past it (with
        # ceiling 27.5, 27 and not 28, which would be out of the band and moved again).
        return max(0, math.floor(d.ceiling - self.load() + 1e-9))

    def successor(self) -> str | None:
        """Whom the next stream we let go is handed to (``worker.successors``)."""
        return self.successors.next()

    def withdraws(self, conn_id: str, successor: str) -> bool:
        """At READY: whether the shed of ``conn_id`` to ``successor`` is withdrawn, because
        the live directive no longer names that successor (a deploy began meanwhile: an old
        worker that will stop too). Then the stream stays ours and its shed slot is free."""
        d = self.live_directive()
        if d is None or any(o == successor for o, _ in d.successors):
            return False
        self._offered.discard(conn_id)
        self._wake.set()
        return True

    def refuses(self, conn_id: str) -> bool:
        """True for a stream we shed within its cool-down: it goes to another worker."""
        until = self._refuse.get(conn_id)
        return until is not None and self.mono() < until

    # -- shedding -----------------------------------------------------------------------
    def shedding(self) -> int:
        """Our streams in motion: being shed, or released by a shed and not owned again."""
        self._offered &= self.streams.keys()
        return sum(1 for c in self.streams.values() if c.held.stop_reason == SHED or (
            c.conn_id in self._offered and not c.held.stopping)) + len(
            self._moving - self.streams.keys())

    def step(self) -> list[str]:
        """Shed what the target (or draining) asks for now; the ids handed on."""
        now_mono = self.mono()
        self._refuse = {k: v for k, v in self._refuse.items() if v > now_mono}
        d = self.live_directive()
        if self.draining and self._awaiting_successors(d):
            return []
        if self.draining:
            share, at_once = 0.0, (d.shed_at_once if d is not None and d.shed_at_once > 0
                                   else self.drain_at_once)
        elif d is not None and d.shed_at_once > 0 and not self.throttled():
            share, at_once = d.share, d.shed_at_once
        else:
            return []
        now = self.wall()
        views = [HeldView(c.conn_id, c.held.lease.weight,
                          max(c.held.lease.moved_at_ms or 0, self._claimed_at.get(c.conn_id, 0)))
                 for c in self.streams.values() if c.held.live and not c.held.stopping
                 and c.conn_id not in self._offered]
        shedding = self.shedding()
        # What is on its way out no longer counts against the share.
        load = sum(v.weight for v in views)
        if load <= share + 1e-9:
            return []
        picked = pick_sheds(views, share=share, shed_at_once=at_once, shedding=shedding,
                            now_ms=now, cooldown_ms=self.cooldown_ms, draining=self.draining)
        for conn_id in picked:
            conn = self.streams.get(conn_id)
            if conn is None:
                continue
            self._refuse[conn_id] = now_mono + max(self.cooldown_ms, _REFUSE_MIN_MS)
            conn.log("info", "shedding stream (rebalancing)" if not self.draining
                     else "shedding stream (draining)", share=share, load=load)
            self.metrics.incr(names.METRIC_STREAMS_SHED)
            successor = self.successor()
            if successor is not None and self.offer is not None and self.offer(
                    conn, successor, SHED):
                self._offered.add(conn_id)  # delivers until the successor is warm
                continue
            conn.drain_to(successor, SHED)
        return picked

    def _awaiting_successors(self, d: Directive | None) -> bool:
        """A drain that began with no live target naming successors waits for the decider's
        answer (it decides for a member that begins draining at its next sweep), each stream
        delivering meanwhile, at most ``ASK_WAIT_MS``, as a stop does (``worker.successors``):
        shed at once, its streams went to whoever polled first (a soak saw one claimed again
        by the worker that had just shed it, 2.4 s later). An answer naming nobody (no worker
        has room) ends the wait."""
        if self._drain_from is None or self.mono() - self._drain_from >= ASK_WAIT_MS:
            return False
        if d is None:
            return True
        return not d.successors and not (d.share == 0 and d.ceiling == 0)

    async def run(self) -> None:
        """Shed on every piece of news and every half second, until cancelled."""
        while True:
            self._wake.clear()
            self.step()
            # asyncio.timeout, not wait_for: gh-86296, as in ``worker.session``.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_STEP_S):
                    await self._wake.wait()


def owned_elsewhere_by(store: LeaseStore, owner: Callable[[], str | None],
                       ) -> Callable[[str], Awaitable[bool]]:
    """The check ``Balancing`` follows a shed stream with: it has an owner other than
    ``owner()`` now, or it is stopped or deleted (its move is over either way)."""

    async def check(conn_id: str) -> bool:
        raw = await on_io_threads(store.get_raw, conn_id)
        if raw is None or raw.get(ATTR.desired_state, {}).get("S") != STARTED:
            return True
        held_by = raw.get(ATTR.lease_owner, {}).get("S")
        return held_by is not None and held_by != owner()

    return check
