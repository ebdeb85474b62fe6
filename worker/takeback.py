"""The holder's take-back of a stream whose item a write outside the protocol removed (an app's
``PutItem`` of the whole item, ``holdfast.core.overwrites``): part of the ``Checkpointer``,
whose refused checkpoint finds it, as the router's ``retake`` order does.

- **going on** (``retake``): our owner, epoch and last stored checkpoint written back, and the
  stream delivers on (drained and released if the write set STOPPED); stopped at once if the
  write is refused (someone claimed it meanwhile) or gets no answer (unowned, it is
  claimable any moment);
- **giving back** (``give_back_soon``): a stream that stops delivering without having taken
  it back (the take-back got no answer; a handoff's transfer, a release or a checkpoint of a
  stopping stream found the item written over) is taken back only to be released at once
  with its checkpoint, which the write removed: its next holder resumes there, not at the
  upstream's head (seqs skipped). Tried again while DynamoDB does not answer, for up to
  ``GIVE_BACK_MS`` while our session lives: past the router's hold (a session TTL) another
  worker may claim it first (then the take-back is refused and nothing is written), but
  while DynamoDB is down for everyone, the first write to land after it is often ours. A
  give-up's release (``GiveUp``) is given back as the give-up it was: its error, back-off and
  give-ups in a row, or a broken upstream would be claimed again at once. A stream that ended
  with its release unanswered (``unreleased``; often past its fence: DynamoDB was failing) is
  remembered for ``GIVE_BACK_MS``: the router's ``retake`` order for it proves it was still
  this holding when written over, and it is given back (``ordered_back``) even past its fence.

Only on the stream's own URL (``ours_to_take``): an item naming another is another stream
under the same id, whose seqs ours must not be written over.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from holdfast.core import names, rules
from holdfast.core.exceptions import HoldfastError, LeaseLost, LossReason, StoreUnavailable
from holdfast.core.model import str_attr
from holdfast.core.schema import ATTR
from holdfast.worker.backoff import unanswered_write_retry_s
from holdfast.worker.balancing import HANDOFF
from holdfast.worker.connection import Connection
from holdfast.worker.held import STOPPED
from holdfast.worker.iothreads import logs_failure

if TYPE_CHECKING:
    from holdfast.core.model import Lease
    from holdfast.core.store import LeaseStore
    from holdfast.worker.checkpointer import Checkpointer

__all__ = ["GIVE_BACK_MS", "GiveUp", "TakeBack", "ours_to_take"]

T = TypeVar("T")
GIVE_BACK_MS = 60_000


@dataclass(frozen=True, slots=True)
class GiveUp:
    """A give-up's release terms (``Endings``): what ``LeaseStore.release`` records, the
    give-ups in a row before this one (the release adds it), and the back-off's end."""

    error: str
    errors_before: int
    retry_at_ms: int

    def release(self, store: LeaseStore, lease: Lease,
                checkpoint: int | None) -> LossReason | None:
        """``store.release`` of ``lease`` as this give-up (the one way one is written)."""
        return store.release(dataclasses.replace(lease, error_count=self.errors_before),
                             checkpoint, error=self.error, retry_at_ms=self.retry_at_ms)


def ours_to_take(conn: Connection, lost: LeaseLost) -> bool:
    """``lost`` says the stream was written over on ``conn``'s own URL."""
    return lost.reason is LossReason.OVERWRITTEN and (
        lost.current is None or _our_url(conn, lost.current.ws_url))


def _holding(conn_id: str, epoch: int | None) -> str:
    return f"{conn_id}#{epoch}"  # a later holding of the same id is another's


def _holding_of(conn: Connection) -> str:
    return _holding(conn.held.lease.conn_id, conn.held.lease.epoch)


def _our_url(conn: Connection, url: str | None) -> bool:
    # Another URL under our id is another stream (deleted and created again, or an app's new
    # URL): its seqs are not ours, and ours must not be written over it.
    return url == conn.held.lease.ws_url


class TakeBack:
    """The take-backs of one ``Checkpointer``'s streams (its store, threads and fence)."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.cp = checkpointer
        self._running: dict[str, asyncio.Task[bool]] = {}  # by holding: "<conn id>#<epoch>"
        self._giving: dict[str, asyncio.Task[bool]] = {}
        # Holdings ended with their release unanswered, its give-up terms if it was one, and
        # until when they are remembered (mono ms).
        self._unreleased: dict[str, tuple[Connection, GiveUp | None, int]] = {}
        # Holdings the router ordered taken back while they were ending (their release still
        # being written), and until when (mono ms): given back should that release fail.
        self._ordered: dict[str, int] = {}

    async def settled(self) -> None:
        """The give-backs under way, done: a stop's goodbye waits for them (within its
        bound) before the session ends, since its releases are theirs."""
        if self._giving:
            await asyncio.wait(list(self._giving.values()))

    def cancel(self) -> None:
        """Stop every take-back and give-back under way (at a stop, once its goodbye is
        over: their threads go next)."""
        for task in (*self._running.values(), *self._giving.values()):
            task.cancel()

    def soon(self, conn: Connection, source: str) -> None:
        """Take back ``conn`` (``retake``) unless a take-back of it is under way already."""
        self._once(self._running, conn, self.retake(conn, source), "take-back")

    async def retake(self, conn: Connection, source: str) -> bool:
        """Take back a stream that goes on (found by a checkpoint, or the router's order)."""
        if conn.held.stopping or conn.held.stop_reason == HANDOFF or not conn.held.live:
            if source == "order":  # its release may yet fail: ``give_back_soon``
                now = self.cp.mono()
                self._forget(now)
                self._ordered[_holding_of(conn)] = now + GIVE_BACK_MS
            return False  # ending: given back by whatever finds it (``give_back_soon``)
        try:
            # The order was given for the write it saw; a later one may have named another
            # URL, which the take-back's condition cannot see (a worker's writes may not name
            # ``ws_url``): read it first (a checkpoint's refusal read it already, but this is
            # rare).
            raw = await self._run(self.cp.store.get_raw, conn.held.lease.conn_id)
            if raw is not None and not _our_url(conn, str_attr(raw, ATTR.ws_url)):
                conn.log("warning", "written over with another URL: another stream under our "
                         "id, not taken back; stopping ours", source=source)
                conn.lose("written over with another URL")
                return False
            stopped = await self._write(conn, source)
        except LeaseLost as lost:
            if lost.reason is LossReason.OVERWRITTEN:  # not ours to take after all: stop
                lost = LeaseLost(lost.conn_id, LossReason.LOST, lost.current)
            self.cp.on_lost(conn, lost, "take-back")
            return False
        except HoldfastError as exc:
            # Unowned meanwhile, so another worker may claim it once the router's hold ends:
            # stop at once, and give it back with our checkpoint if DynamoDB answers in time.
            conn.log("warning", "cannot take back a stream written over: stopping it",
                     error=str(exc)[:300], source=source)
            conn.lose("written over, not taken back")
            self.give_back_soon(conn, source)
            return False
        if stopped:  # the write set STOPPED: released now with our checkpoint
            conn.drain_to(None, STOPPED)
        return stopped is not None

    def give_back_soon(self, conn: Connection, source: str, give_up: GiveUp | None = None,
                       *, ordered: bool = False) -> None:
        """Take back ``conn``, which no longer delivers, and release it with its checkpoint
        (``give_back``), unless that is under way already; ``ordered`` (past its fence too)
        if the router ordered it taken back, now or while it was ending (``retake``)."""
        now = self.cp.mono()
        self._forget(now)
        ordered = self._ordered.pop(_holding_of(conn), 0) > now or ordered
        self._once(self._giving, conn, self.give_back(conn, source, give_up, ordered=ordered),
                   "giving back")

    def unreleased(self, conn: Connection, give_up: GiveUp | None = None) -> None:
        """``conn`` ended and its release (a give-up's, with ``give_up``) got no answer: ours
        still, perhaps (our stray scan takes it back then), or written over meanwhile, its
        checkpoint gone with the write; remembered for ``GIVE_BACK_MS`` should the router
        order it taken back, or given back now if it did while the release was written."""
        now = self.cp.mono()
        self._forget(now)
        if _holding_of(conn) in self._ordered:
            self.give_back_soon(conn, "order", give_up)
        else:
            self._unreleased[_holding_of(conn)] = (conn, give_up, now + GIVE_BACK_MS)

    def _forget(self, now: int) -> None:
        """Drop what is remembered past its minute (its ``Connection`` goes with it)."""
        self._unreleased = {k: v for k, v in self._unreleased.items() if v[2] > now}
        self._ordered = {k: t for k, t in self._ordered.items() if t > now}

    def ordered_back(self, conn_id: str, epoch: int | None) -> bool:
        """The router's ``retake`` order for a holding of ours that ended with its release
        unanswered (``unreleased``): given back with its checkpoint, past its fence too (the
        order names the owner and epoch the write removed: nobody's but this holding's until
        then). False if there is none."""
        self._forget(self.cp.mono())
        conn, give_up, _ = self._unreleased.pop(_holding(conn_id, epoch), (None, None, 0))
        if conn is None:
            return False
        self.give_back_soon(conn, "order", give_up, ordered=True)
        return True

    @staticmethod
    def _once(tasks: dict[str, asyncio.Task[bool]], conn: Connection,
              work: Coroutine[Any, Any, bool], what: str) -> None:
        """Run ``work`` for ``conn`` unless ``tasks`` has one for its holding under way (by id
        and epoch: a later holding of the same id is another's)."""
        key = _holding_of(conn)
        if key in tasks:
            work.close()  # never awaited: not started
            return
        task = asyncio.get_running_loop().create_task(work)
        tasks[key] = task
        task.add_done_callback(lambda _t: tasks.pop(key, None))
        task.add_done_callback(logs_failure(what))

    async def give_back(self, conn: Connection, source: str,
                        give_up: GiveUp | None = None, *, ordered: bool = False) -> bool:
        """Take back a stream written over that delivers no more and release it with its
        checkpoint (as ``give_up``, if its release was one); False if it was not ours to take
        (claimed since, another URL, past its fence unless ``ordered``: ``ordered_back``) or
        DynamoDB did not answer for ``GIVE_BACK_MS``."""
        cp, held = self.cp, conn.held
        lease, checkpoint = held.lease, held.checkpoint
        release = cp.store.release if give_up is None else functools.partial(
            give_up.release, cp.store)
        until = cp.mono() + GIVE_BACK_MS
        for attempt in itertools.count():
            sent = cp.mono()
            if (sent >= held.deadline() and not ordered) or sent >= until:
                conn.log("warning", "a stream written over was not given back: its next "
                         "holder starts without its checkpoint", source=source)
                return False
            try:
                raw = await self._run(cp.store.get_raw, lease.conn_id)
                # Ours already: an earlier attempt's take-back landed, its release did not.
                if raw is None or not rules.held_by(raw, lease.owner, lease.epoch):
                    if raw is None or not rules.written_over(raw, lease.epoch) or not (
                            _our_url(conn, str_attr(raw, ATTR.ws_url))):
                        return False  # gone, claimed since, or another stream under our id
                    taken = await self._run(cp.store.retake, lease, checkpoint)
                    if taken is not None:
                        self._taken(conn, checkpoint, source)
                        lease = taken[0]
                lost = await self._run(release, lease, checkpoint)
            except LeaseLost:
                return False  # claimed meanwhile: not ours to give back
            except StoreUnavailable:
                await cp.sleep(unanswered_write_retry_s(attempt))
                continue
            except HoldfastError as exc:
                conn.log("warning", "cannot give back a stream written over",
                         error=str(exc)[:300], source=source)
                return False
            conn.log("info", "a stream written over given back with its checkpoint",
                     checkpoint=checkpoint, lost=str(lost) if lost else None,
                     gave_up=give_up is not None or None)
            return lost is None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(self, conn: Connection, source: str) -> bool | None:
        """The take-back's write: whether the write over it set STOPPED (logged and counted;
        False also if it is ours already: an order twice, by its queue and its session);
        None if not tried (ended, or past its fence). Raises the store's errors."""
        cp, held = self.cp, conn.held
        sent = cp.mono()
        if not held.live or sent >= held.deadline():
            return None  # ended, or past its fence (its session may be dead)
        taken = await self._run(cp.store.retake, held.lease, held.checkpoint)
        if taken is None:
            return False  # ours already: nothing written
        lease, stopped = taken
        held.renewed(lease, cp.fence_after(sent))
        self._taken(conn, held.checkpoint, source, stopped=stopped)
        return stopped

    def _taken(self, conn: Connection, checkpoint: int | None, source: str,
               **fields: object) -> None:
        self.cp.metrics.incr(names.METRIC_HOLDINGS_TAKEN_BACK)
        conn.log("error", "the stream's item was written over outside the protocol (an app's "
                 "PutItem of the whole item?): our holding and checkpoint written back; "
                 "update stream items with UpdateItem", checkpoint=checkpoint, source=source,
                 **fields)

    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.cp.executor, call, *args)
