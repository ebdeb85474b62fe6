"""A worker's new session incarnation: wait out a predecessor with our id, refuse a live twin.

A crashed predecessor (the same worker id: an ECS task restarted in place, a process restarted
by its supervisor) stops counting as alive ``TTL + skew`` after its last heartbeat: until then
``SessionStore.retire_predecessor`` refuses, and we wait, saying so once; then it is reaped,
and our incarnation written after the reap (its TTL is not spent on it). One that still
heartbeats after ``TTL + skew + 2 heartbeats`` is a second live process with our id: the
refusal is raised and the worker does not start. A table that does not answer is retried.
Every retry is jittered, so a fleet restarted after a regional problem does not retry in step.
Clock, sleep and jitter are parameters (tests run without waiting).

A running worker whose session was lost starts a new one with ``restart_incarnation``: what
``start_incarnation`` does not retry (refused credentials, a missing table, a malformed item, a
twin past its wait) is logged and tried again, jittered, for ``RESTART_WINDOWS`` conflict
windows; then the worker gives up and stops (its exit code tells the platform to replace it):
without a session it holds and claims nothing, and a new process may fare better.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from aws_lambda_powertools import Logger

from holdfast.core.exceptions import HoldfastError, SessionConflict, StoreUnavailable
from holdfast.core.rules import LeaseTiming
from holdfast.core.session_items import ENDED_BEFORE_START
from holdfast.core.sessions import Session, SessionStore, new_incarnation
from holdfast.worker.backoff import Backoff
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER

__all__ = ["RESTART_BACKOFF", "RESTART_WINDOWS", "conflict_window_ms", "end_incarnation",
           "end_kept_session", "restart_for_ms", "restart_incarnation", "start_incarnation"]

if TYPE_CHECKING:
    from holdfast.worker.session import SessionKeeper

logger = Logger(service=WORKER_LOGGER, child=True)

# How long a lost session's restart is retried, in conflict windows (``conflict_window_ms``:
# the longest one start waits out a predecessor): a table briefly missing or credentials
# being rotated get a few tries; past that a replacement process comes sooner than a recovery.
RESTART_WINDOWS: Final = 4
RESTART_BACKOFF: Final = Backoff(base_s=1.0, cap_s=10.0)


async def end_incarnation(sessions: SessionStore, session: Session, *, reason: str) -> bool:
    """End our own session (ENDED, ``SessionStore.end``): the worker's one goodbye write, so
    the sweeper releases at once what it still owns instead of after a TTL. False, logged, if
    the write failed or found the session no longer ours and ALIVE: it then expires."""
    try:
        ended = await on_io_threads(sessions.end, session, reason)
    except HoldfastError as exc:
        logger.warning("cannot end the session; it will expire", reason=reason,
                       error=str(exc)[:300])
        return False
    if not ended:
        logger.info("session not ended: no longer ours and alive", reason=reason,
                    incarnation=session.incarnation)
    return ended


async def end_kept_session(keeper: SessionKeeper, *, reason: str,
                           leave_to_expire: bool = False) -> bool:
    """The end of the session ``keeper`` renews, the one way a worker ends its own: no more
    heartbeats, then ``end_incarnation`` (unless ``leave_to_expire``: a handler that would not
    stop still runs, and ended, the sweeper would release its streams beside it). Whether the
    session was ended."""
    keeper.stop()
    if leave_to_expire:
        return False
    return await end_incarnation(keeper.store, keeper.session, reason=reason)


def conflict_window_ms(timing: LeaseTiming) -> int:
    """How long a start waits for a predecessor with our id before refusing it as a twin."""
    return timing.lease_ms + timing.skew_ms + 2 * timing.heartbeat_ms


def restart_for_ms(timing: LeaseTiming) -> int:
    """How long ``restart_incarnation`` tries before giving up (``RESTART_WINDOWS``)."""
    return RESTART_WINDOWS * conflict_window_ms(timing)


async def start_incarnation(sessions: SessionStore, worker_id: str, *, capacity: int,
                            version: str, timing: LeaseTiming, mono: Callable[[], int],
                            sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                            rand: Callable[[], float] = random.random,
                            stopping: Callable[[], bool] = lambda: False,
                            declared_dead: Callable[[], None] = lambda: None,
                            ) -> tuple[Session, int] | None:
    """The new incarnation and when its write was sent (``mono`` ms; see the module); None
    once ``stopping()`` (the worker's stop began): no attempt is made, and one that landed
    meanwhile is ended at once (it holds nothing; the goodbye may have stopped the keeper).
    ``declared_dead`` is called when our start declared a silent predecessor dead: not one
    of our own attempts (written, its answer lost), which is no death."""
    deadline = mono() + conflict_window_ms(timing)
    warned, tried = False, set[str]()
    while True:
        if stopping():
            return None
        try:
            incarnation = new_incarnation()
            tried.add(incarnation)
            old, declared = await on_io_threads(sessions.retire_predecessor, worker_id,
                                                incarnation)
            if declared and old is not None and old.incarnation not in tried:
                declared_dead()  # a crashed predecessor with our id: a death, as any other
            if stopping():
                return None
            sent = mono()  # after the reap (seconds for thousands of streams): see ``begin``
            session = await on_io_threads(sessions.begin, worker_id, capacity, incarnation, old,
                                          version=version)
            if not stopping():
                return session, sent
            await end_incarnation(sessions, session, reason=ENDED_BEFORE_START)
            return None
        except SessionConflict as conflict:
            if mono() >= deadline:
                raise
            if not warned:
                logger.warning("worker id in use by a live session: waiting for it to expire",
                               worker_id=worker_id, incarnation=conflict.incarnation,
                               expires_in_ms=conflict.expires_in_ms)
                warned = True
        except StoreUnavailable as exc:
            logger.warning("cannot start the session yet", error=str(exc)[:300])
        await sleep(min(1.0, timing.heartbeat_ms / 1000) * (0.5 + rand()))


async def restart_incarnation(start: Callable[[], Awaitable[None]], *, for_ms: int,
                              mono: Callable[[], int], stopping: Callable[[], bool],
                              sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                              rand: Callable[[], float] = random.random) -> bool:
    """Run ``start`` (a new session, after the last was lost) until it returns or
    ``stopping()``; each failure logged and retried after ``RESTART_BACKOFF`` for ``for_ms``
    (``mono`` ms). False if it gave up (see the module)."""
    deadline = mono() + for_ms
    failures = 0
    while not stopping():
        try:
            await start()
            return True
        except Exception as exc:  # anything: a worker with no session must not go on silently
            failures += 1
            give_up = mono() >= deadline
            # Ours (refused, missing, malformed) in one line; anything else with its traceback.
            logger.error("cannot start a new session" + (
                ": giving up" if give_up else "; retrying"), attempts=failures,
                error=f"{type(exc).__name__}: {exc}"[:300],
                exc_info=not isinstance(exc, HoldfastError))
            if give_up:
                return False
        await sleep(RESTART_BACKOFF.delay_s(failures, rand))
    return True
