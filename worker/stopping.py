"""A worker's graceful stop of its streams, bounded by the stop budget (``shutdown_s``).

1. hand streams over warm to the successors the decider named (make-before-break,
   ``worker.handoff``; where the live target names too few, the stop asks the decider for the
   rest and the offers wait for its answer, ``worker.successors``), a few at a time
   (``worker.warmpace``: ``warm_at_once``, the fewest that fit the warm phase; more as the
   pace needs once it has one, ``warm_pace``), each delivering until its turn, for
   as long as an offer can still end before the drain deadline (``DRAIN_SHARE`` of the
   budget); the streams at the queue's end that the offers will not reach at their pace so far
   (``worker.warmpace`` ``beyond_warm_reach``) go to step 2 at once;
2. drain the rest: the handler call in flight finishes, the connection closes, then the lease
   is released with its final checkpoint, naming the successor if there is one
   (``worker.endings``);
3. what has not drained by the drain deadline is aborted (the call in flight is not
   checkpointed) and released all the same; releases still hanging half a second before the
   budget ends are cancelled (their leases are reaped once the session ends).

Then the goodbye (``goodbye``): the releases still being sent (their callers cancelled at the
budget's end) given up to ``RELEASES_SETTLE_S`` to land, the last handoff messages, the nudges
of our last polls handed back, the session ended (the sweeper then releases whatever we could
not, without waiting a TTL), the order queue deleted. The wait for our last polls leaves it
the budget's last ``goodbye_s``. Each wait on SQS (the last messages, our last polls, the order
queue's deletion) ends with the budget, the ones before the session's end ``SESSION_END_S``
before it: an SQS that does not answer (25 s read timeout, retries) must not keep the session
from being ended before the platform's SIGKILL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools import Logger

from holdfast.core.handoff import WARM_TIMEOUT_MS
from holdfast.core.session_items import ENDED_AT_STOP
from holdfast.worker.held import SHUTDOWN, SHUTDOWN_TIMEOUT
from holdfast.worker.incarnation import end_kept_session
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.warmpace import warm_at_once

if TYPE_CHECKING:
    from holdfast.worker.balancing import Balancing
    from holdfast.worker.claimer import Claimer
    from holdfast.worker.connection import Connection
    from holdfast.worker.handoff import Handoffs
    from holdfast.worker.orders import OrderInbox
    from holdfast.worker.outbox import Outbox
    from holdfast.worker.session import SessionKeeper

__all__ = ["DRAIN_SHARE", "GOODBYE_S", "RELEASES_SETTLE_S", "SESSION_END_S", "SQS_WAIT_LEAST_S",
           "goodbye", "goodbye_s", "stop_streams", "unless_told_first", "until_first",
           "wait_tasks"]

logger = Logger(service=WORKER_LOGGER, child=True)

DRAIN_SHARE: Final = 0.6  # of the stop budget; the rest is for releases
# The end of the budget our last polls' wait leaves for the goodbye (the last handoff
# messages, the session's end, the order queue's deletion: about 0.9 s after a 1,000-stream
# stop on a loaded machine). The wait had the whole rest of the budget, and a stop whose
# releases were all done in 6.4 s of 8 exited 0.9 s past it. A tenth of a short budget at most.
GOODBYE_S: Final = 1.0
# How long the goodbye waits for release calls still out when the streams step ends (their
# callers cancelled at the budget's end; the calls go on). Ended before them, the session's end
# set the sweeper racing them, and their spans could end after tracing had shut down (23
# "Processor is already shutdown" lines followed the one 1,000-stream stop of four whose last
# batch of 25 releases was still out).
# Past the budget, but the platform's SIGKILL comes at least 10 s after it (the stack's).
RELEASES_SETTLE_S: Final = 1.0
# Kept before the budget's end for the session's end (one DynamoDB write, tens of ms) when the
# goodbye's SQS waits are bounded; and the least each of those waits gets (a healthy SQS answers
# in tens of ms), so a stop whose releases used its whole budget still sends its last handoff
# messages: past the budget, within the platform's grace (at least 10 s, as above).
SESSION_END_S: Final = 0.5
SQS_WAIT_LEAST_S: Final = 0.25


def goodbye_s(budget_s: float) -> float:
    """The end of a stop budget of ``budget_s`` kept for the goodbye (``GOODBYE_S``)."""
    return min(GOODBYE_S, 0.1 * budget_s)


async def wait_tasks(tasks: Collection[asyncio.Task[None]], timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for ``tasks`` to end."""
    if tasks and timeout_s > 0:
        await asyncio.wait(list(tasks), timeout=timeout_s)


async def stop_streams(streams: dict[str, Connection], tasks: set[asyncio.Task[None]], *,
                       budget_s: float, balancing: Balancing, handoffs: Handoffs | None,
                       mono: Callable[[], int],
                       mark_draining: Callable[[], Awaitable[bool]] | None = None) -> None:
    """Stop every stream within ``budget_s`` (see the module); ``tasks`` are their tasks.
    ``mark_draining`` marks our session draining: how a stop asks the decider for the
    successors its pinned directive does not name (``worker.successors``)."""
    t0 = time.monotonic()
    rest = list(streams.values())
    successors = balancing.successors
    successors.pin()
    asking: asyncio.Task[None] | None = None
    if handoffs is not None:
        if mark_draining is not None and successors.needs(len(rest)):
            asking = successors.ask(mark_draining)
        # Warm first, a few at a time, while an offer can still end (handed over, or fallen
        # back to a release) before the drain deadline; each stream delivers until its turn.
        phase_ms = round((budget_s * DRAIN_SHARE) * 1000) - WARM_TIMEOUT_MS
        rest = await handoffs.offer_at_stop(
            rest, successors.next, at_once=warm_at_once(len(rest), phase_ms),
            until_ms=mono() + phase_ms, awaiting=successors.awaiting)
    for conn in rest:
        if conn.held.stopping:
            continue  # stopping already (a shed, a handoff): its own way out stands
        # Drained and released to the successor the decider named (or nobody).
        conn.drain_to(successors.next(), SHUTDOWN)
    await wait_tasks(tasks, budget_s * DRAIN_SHARE - (time.monotonic() - t0))
    for conn in [c for c in streams.values() if not c.ended]:
        conn.log("warning", "handler still busy at the drain deadline: aborting")
        conn.abort(SHUTDOWN_TIMEOUT)
    # Releases are not cut short for the goodbye: a stream released carries its final
    # checkpoint, one left to the reaper resumes from its last (a 1,000-stream stop with the
    # goodbye's second taken from its releases left 431 of them to the reaper, 424 seqs
    # handled twice); the platform's grace is past the budget (the stack's: at least 10 s).
    await wait_tasks(tasks, max(0.0, budget_s - (time.monotonic() - t0) - 0.5))
    for task in list(tasks):
        task.cancel()  # releases still hanging on DynamoDB: the leases will expire
    if tasks:
        await asyncio.wait(list(tasks), timeout=0.5)
    if asking is not None:
        asking.cancel()  # the mark hanging on DynamoDB: the session ends anyway


async def _bounded(what: str, wait: Coroutine[Any, Any, object], ends_at: float | None,
                   room_s: float = 0.0) -> None:
    """Await ``wait`` until ``room_s`` before ``ends_at`` (``time.monotonic``; None: no end),
    at least ``SQS_WAIT_LEAST_S``; cut short with a log line naming ``what``."""
    if ends_at is None:
        await wait
        return
    timeout_s = max(SQS_WAIT_LEAST_S, ends_at - room_s - time.monotonic())
    try:
        await asyncio.wait_for(wait, timeout_s)
    except TimeoutError:
        logger.warning(f"stop budget spent: {what} cut short", waited_s=round(timeout_s, 3))


async def goodbye(*, outbox: Outbox, claimer: Claimer, keeper: SessionKeeper,
                  inbox: OrderInbox | None, polls_s: float,
                  releases_settled: Callable[[], Awaitable[None]] | None = None,
                  streams_running: Callable[[], int] = lambda: 0,
                  ends_at: float | None = None) -> dict[str, float]:
    """After the streams: the claims and releases still being sent (``releases_settled``, at
    most ``RELEASES_SETTLE_S``), the last messages, our last polls (at most ``polls_s``), the
    session's end, the order queue; when each step ended (``time.monotonic``). The SQS waits
    end with the stop budget (``ends_at``, ``time.monotonic``; see the module). With
    ``streams_running()`` still above 0 (a handler that would not stop, even cancelled) the
    session is not ended but left to expire: ended, the sweeper releases its streams at once,
    and the next holder would deliver beside that handler."""
    steps: dict[str, float] = {}
    if releases_settled is not None:
        try:
            await asyncio.wait_for(releases_settled(), RELEASES_SETTLE_S)
        except TimeoutError:
            logger.warning("releases still being sent at the session's end",
                           waited_s=RELEASES_SETTLE_S)
        steps["releases"] = time.monotonic()
    # The handoff messages of the last releases and transfers go before the goodbye.
    await _bounded("sending the last messages", outbox.drain(), ends_at, SESSION_END_S)
    steps["messages"] = time.monotonic()
    # Nudges for the streams just released may sit in our own last polls: hand them on.
    if ends_at is not None:
        polls_s = min(polls_s, max(0.0, ends_at - SESSION_END_S - time.monotonic()))
    await claimer.finish_polls(polls_s)
    steps["polls"] = time.monotonic()
    # Goodbye: the sweeper releases whatever we could not, without waiting a TTL.
    running = streams_running()
    if running:
        logger.warning("streams still running at the session's end (a handler that would not "
                       "stop): the session is left to expire, not ended", streams=running)
    await end_kept_session(keeper, reason=ENDED_AT_STOP, leave_to_expire=running > 0)
    steps["session"] = time.monotonic()
    if inbox is not None:
        await _bounded("deleting the order queue", inbox.close(), ends_at)
    steps["inbox"] = time.monotonic()
    return steps


async def until_first(*waits: Callable[[], Awaitable[object]]) -> None:
    """Until the first of ``waits`` completes (the others are cancelled); one that failed
    raises here, as it would have awaited alone."""
    futures = [asyncio.ensure_future(wait()) for wait in waits]
    try:
        done, _ = await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:
            future.cancel()
    for ended in done:
        ended.result()


async def unless_told_first(work: Awaitable[object],
                            trigger: Callable[[], Awaitable[object]]) -> bool:
    """Await ``work`` unless ``trigger`` completes first (``work`` is then cancelled): True if
    ``work`` completed. A start that retries for as long as DynamoDB is unreachable must not
    outlive a SIGTERM: the platform would kill the process just as its session began."""
    working, told = asyncio.ensure_future(work), asyncio.ensure_future(trigger())
    try:
        await asyncio.wait({working, told}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # cancelled itself: the work must not run on without its caller
        working.cancel()
        raise
    finally:
        told.cancel()
    if not working.done():
        working.cancel()
        await asyncio.gather(working, return_exceptions=True)
        return False
    working.result()  # its failure raises here, as it would have awaited alone
    return True
