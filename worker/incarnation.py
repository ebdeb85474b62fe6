"""A worker's new session incarnation: wait out a predecessor with our id, refuse a live twin.

A crashed predecessor (the same worker id: an ECS task restarted in place, a process restarted
by its supervisor) stops counting as alive ``TTL + skew`` after its last heartbeat: until then
``SessionStore.start`` refuses, and we wait, saying so once. One that still heartbeats after
``TTL + skew + 2 heartbeats`` is a second live process with our id: the refusal is raised and
the worker does not start. A table that does not answer is retried. Every retry is jittered,
so a fleet restarted after a regional problem does not retry in step. Clock, sleep and jitter
are parameters (tests run without waiting).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from aws_lambda_powertools import Logger

from holdfast.core.exceptions import SessionConflict, StoreUnavailable
from holdfast.core.rules import LeaseTiming
from holdfast.core.sessions import Session, SessionStore
from holdfast.worker.iothreads import on_io_threads

__all__ = ["start_incarnation"]

logger = Logger(service="holdfast-worker", child=True)


async def start_incarnation(sessions: SessionStore, worker_id: str, *, capacity: int,
                            version: str, timing: LeaseTiming, mono: Callable[[], int],
                            sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                            rand: Callable[[], float] = random.random) -> tuple[Session, int]:
    """The new incarnation and when its write was sent (``mono`` ms; see the module)."""
    deadline = mono() + timing.lease_ms + timing.skew_ms + 2 * timing.heartbeat_ms
    warned = False
    while True:
        sent = mono()
        try:
            session = await on_io_threads(sessions.start, worker_id, capacity, version=version)
            return session, sent
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
