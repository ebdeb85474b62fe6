"""Whom the streams this worker lets go are handed to: the successors the decider named.

With each target the decider (``holdfast.core.placement``) names where the streams its worker
lets go should go, as (owner, how many). ``next`` hands them out one stream at a time, a
weighted round robin; None when there is none to name (then whoever has room takes the stream).

A stop pins the directive live at its start (``pin``): the decider makes each list as if its
worker stopped next, and workers stopping together that followed the lists it kept remaking
from the half-moved fleet all sent their rest to the same new worker. What a pinned list cannot
name (a balanced fleet has no live targets, so a scale-in's SIGTERM had no successor at all;
a fleet out of balance names only the excess) the stop asks the decider for: the worker marks
its own session draining (``ask``; the same flag as ``holdfast drain``, so a stop and a drain
are one path), the decider decides for a member that begins draining at its next sweep
(``lambdas.sweeper.balancer``), and the directive that comes back, naming successors for all
it holds, is pinned once the first has none left (``newer``). The stop's warm handoffs wait for
it (``awaiting``), each stream delivering meanwhile, at most ``ASK_WAIT_MS``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from aws_lambda_powertools import Logger

from holdfast.core.directives import Directive
from holdfast.core.exceptions import HoldfastError
from holdfast.worker.logs import WORKER_LOGGER

__all__ = ["ASK_WAIT_MS", "Successors"]

logger = Logger(service=WORKER_LOGGER, child=True)

# How long a stop waits for the decider's answer to its drain mark: its next sweep (1 s at the
# default) and the directive on our order queue. A decider down or turned off costs the stop
# this much of its budget, its streams delivering, before they go to whoever has room.
ASK_WAIT_MS: Final = 3_000


@dataclass
class Successors:
    """The successors of this worker's streams (see the module); ``live`` is the live
    directive, ``mono`` the monotonic clock in ms."""

    live: Callable[[], Directive | None]
    mono: Callable[[], int]
    # Handoffs named so far under the directive issued at ``_named_issued`` (its counts).
    _named: dict[str, int] = field(default_factory=dict)
    _named_issued: int = -1
    _given: dict[str, int] = field(default_factory=dict)  # streams each had, every directive
    _pinned: Directive | None = None
    _stopping: bool = False
    _asked_until: int | None = None  # waiting for the decider's answer until (mono ms)
    _later: Directive | None = None  # a stop's next list, once the pinned one is used up

    def next(self) -> str | None:
        """Whom the next stream we let go (shed, drained, stopped) is handed to: among the
        directive's successors with some of its count left, the one that has had the fewest
        of our streams so far for its count (the larger count first on a tie); None when there
        is none (no directive, none named, all counts used). The counts start again with each
        directive, what each successor had does not (while the same ones are named): a shed
        or stop spans several directives, and "most left first" gave the largest count the
        first streams after every one of them (132 / 85 / 83 streams where 100 each was
        meant)."""
        d = self._pinned or self.live()
        if d is None or not d.successors:
            return None
        if d.issued_ms != self._named_issued:
            self._named, self._named_issued = {}, d.issued_ms
            if self._given.keys() - {o for o, _ in d.successors}:
                self._given = {}  # other successors now: what the old ones had is history
        open_ = [(self._given.get(o, 0) / n, -n, i, o) for i, (o, n) in enumerate(d.successors)
                 if self._named.get(o, 0) < n]
        if not open_:
            if self._later is None:
                return None
            self._pin(self._later)
            return self.next()
        owner = min(open_)[3]
        self._named[owner] = self._named.get(owner, 0) + 1
        self._given[owner] = self._given.get(owner, 0) + 1
        return owner

    def unnamed(self, d: Directive) -> int:
        """How many more streams ``d`` can name."""
        named = self._named if d.issued_ms == self._named_issued else {}
        return sum(max(0, n - named.get(o, 0)) for o, n in d.successors)

    def pin(self) -> None:
        """A stop begins: name successors from the directive live now until it ends."""
        self._stopping, self._pinned = True, self.live()

    def needs(self, held: int) -> bool:
        """Whether a stop of ``held`` streams needs more successors than the pinned directive
        names."""
        d = self._pinned
        return held > 0 and (d is None or self.unnamed(d) < held)

    def newer(self, directive: Directive, now_wall_ms: int) -> None:
        """A newer directive arrived: while stopping, pinned once the pinned one has no
        successor left to name, now or when it is used up (the decider's answer to ``ask``,
        which may come before that). A drain's answer that names nobody (no other worker has
        room) ends the wait."""
        pinned = self._pinned
        if not self._stopping or not directive.live(now_wall_ms):
            return
        if not directive.successors:
            if directive.share == 0 and directive.ceiling == 0:
                self._asked_until = None  # our drain, decided: nobody to name
            return
        # The pinned directive read again (the heartbeat brings what the queue brought) is no
        # answer: re-pinned, it ended the wait with nobody named (50 of 100 streams went cold).
        if pinned is not None and directive.issued_ms <= pinned.issued_ms:
            return
        self._asked_until = None  # answered: pinned now, or once the pinned one is used up
        if pinned is not None and self.unnamed(pinned) > 0:
            self._later = directive
            return
        self._pin(directive)

    def _pin(self, directive: Directive) -> None:
        self._pinned, self._later = directive, None
        logger.info("stop: successors named for the rest", successors=len(directive.successors),
                    streams=self.unnamed(directive))

    def ask(self, mark: Callable[[], Awaitable[bool]]) -> asyncio.Task[None]:
        """Ask the decider for successors: ``mark`` our session draining (False: it is not
        live any more), in the task returned; the stop waits for the answer from now on
        (``awaiting``)."""
        self._asked_until = self.mono() + ASK_WAIT_MS
        return asyncio.ensure_future(self._mark(mark))

    async def _mark(self, mark: Callable[[], Awaitable[bool]]) -> None:
        try:
            marked = await mark()
        except HoldfastError as exc:
            logger.warning("stop: cannot ask the decider for successors", error=str(exc)[:300])
            marked = False
        if not marked:
            self._asked_until = None

    def awaiting(self) -> bool:
        """Whether the stop is waiting for the decider's successors (``ask``)."""
        until = self._asked_until
        return until is not None and self.mono() < until
