"""A supervisor's session, started and lost (``worker.supervisor``).

``start_session`` starts a new incarnation (``worker.incarnation``) and keeps it alive: the
``SessionKeeper`` (``worker.session``) is made at the process's first start and kept through
every restart. ``lose_session`` is what a lost session (dead or replaced) costs: every live
stream closed at once, the warm-ups closed, then a new incarnation tried for
``Supervisor.restart_for_ms``; if none can be started, ``Supervisor.restart_failed`` stops the
worker as if told to.

The supervisor owns the session's state (``keeper``, ``owner``, ``counts``); these are how it
changes, kept apart from the run and the stop as ``worker.services`` keeps the service loops.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from holdfast.core import names
from holdfast.worker.incarnation import restart_incarnation, start_incarnation
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.session import SessionKeeper
from holdfast.worker.stopping import wait_tasks

if TYPE_CHECKING:
    from holdfast.core.exceptions import SessionLost
    from holdfast.worker.supervisor import Supervisor

__all__ = ["lose_session", "start_session"]

logger = Logger(service=WORKER_LOGGER, child=True)


async def start_session(sup: Supervisor) -> None:
    """Start a new incarnation (``worker.incarnation``) and renew it from now on."""
    timing = sup.config.timing
    started = await start_incarnation(
        sup.sessions, sup.worker_id, capacity=sup.config.max_connections,
        version=sup.config.version, timing=timing, mono=sup.mono,
        stopping=lambda: sup.stopping,
        # A process's first start only: a restart's predecessor is our own lost session.
        declared_dead=functools.partial(sup.metrics.incr, names.METRIC_DEAD_SESSIONS)
        if sup.keeper is None else lambda: None)
    if started is None:
        return  # a restart the stop overtook: no new incarnation, nothing kept alive
    session, sent = started
    if sup.keeper is None:
        sup.keeper = SessionKeeper(
            sup.sessions, session, timing, sup.metrics, held=lambda: len(sup.streams),
            capacity=sup.config.max_connections, stop_stream=sup.carry_out,
            on_lost=sup.session_lost, mono=sup.mono, clock=sup.loop_clock,
            load=sup.balancing.load, on_beat=sup.balancing.update)
    sup.keeper.started(session, sent)
    # Renewed from now on, before the rest of the start: the session's fence counts from
    # its start write, and a new process's first SQS call (the order queue's creation)
    # took seconds on a loaded machine (a worker fenced itself 1.25 s after its start,
    # its first heartbeat sent 0.25 s before the fence).
    sup.keeper.begin()
    sup.owner = session.owner
    if sup.inbox is not None:
        await sup.inbox.open(session.owner)
    logger.info("session started", worker_id=sup.worker_id, owner=session.owner)


async def lose_session(sup: Supervisor, lost: SessionLost) -> None:
    """Our session is dead or replaced: nothing of it may be used any more."""
    sup.owner = None
    sup.counts["sessions_lost"] += 1
    for conn in list(sup.streams.values()):
        if conn.held.live:
            conn.log("warning", "session lost, closing at once", why=lost.why)
            conn.lose("session")
    if sup.handoffs is not None:
        await sup.handoffs.warm_ups.close_all()
    await wait_tasks(sup.tasks, 5.0)
    if not await restart_incarnation(functools.partial(start_session, sup),
                                     for_ms=sup.restart_for_ms, mono=sup.mono,
                                     stopping=lambda: sup.stopping):
        sup.counts["session_not_restarted"] += 1
        sup.restart_failed.set()
