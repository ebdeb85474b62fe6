"""The holder's take-back of a stream whose item a write outside the protocol removed (an app's
``PutItem`` of the whole item, ``holdfast.core.overwrites``): part of the ``Checkpointer``,
whose refused checkpoint finds it, as the router's ``retake`` order does.

- **going on** (``retake``): our owner, epoch and last stored checkpoint written back, and the
  stream delivers on (drained and released if the write set STOPPED); stopped at once if the
  write is refused (someone claimed it meanwhile) or gets no answer (unowned, it is
  claimable any moment);
- **ending** (``before_release``): a stream on its way out whose last write found it written
  over (a handoff's transfer) is taken back only so that its release can write the
  checkpoint the write removed: its next holder resumes there, not at the upstream's head.

Only on the stream's own URL (``ours_to_take``): an item naming another is another stream
under the same id, whose seqs ours must not be written over.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from holdfast.core import names
from holdfast.core.exceptions import HoldfastError, LeaseLost, LossReason
from holdfast.worker.balancing import HANDOFF
from holdfast.worker.connection import Connection
from holdfast.worker.held import STOPPED
from holdfast.worker.iothreads import logs_failure

if TYPE_CHECKING:
    from holdfast.worker.checkpointer import Checkpointer

__all__ = ["TakeBack", "ours_to_take"]


def ours_to_take(conn: Connection, lost: LeaseLost) -> bool:
    """``lost`` says the stream was written over on ``conn``'s own URL."""
    return lost.reason is LossReason.OVERWRITTEN and (
        lost.current is None or lost.current.ws_url == conn.held.lease.ws_url)


class TakeBack:
    """The take-backs of one ``Checkpointer``'s streams (its store, threads and fence)."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.cp = checkpointer
        self._running: dict[str, asyncio.Task[bool]] = {}  # by conn id

    def soon(self, conn: Connection, source: str) -> None:
        """Take back ``conn`` (``retake``) unless a take-back of it is under way already."""
        conn_id = conn.held.lease.conn_id
        if conn_id not in self._running:
            task = asyncio.get_running_loop().create_task(self.retake(conn, source))
            self._running[conn_id] = task
            task.add_done_callback(lambda _t: self._running.pop(conn_id, None))
            task.add_done_callback(logs_failure("take-back"))

    async def retake(self, conn: Connection, source: str) -> bool:
        """Take back a stream that goes on (found by a checkpoint, or the router's order)."""
        if conn.held.stopping or conn.held.stop_reason == HANDOFF:
            return False  # ending: its release settles it (a transfer's, ``before_release``)
        try:
            stopped = await self._write(conn, source)
        except LeaseLost as lost:
            if lost.reason is LossReason.OVERWRITTEN:  # not ours to take after all: stop
                lost = LeaseLost(lost.conn_id, LossReason.LOST, lost.current)
            self.cp.on_lost(conn, lost, "take-back")
            return False
        except HoldfastError as exc:
            # Unowned meanwhile, so another worker may claim it any moment: stop, as a
            # refused checkpoint did (the sweeper's nudge finds it a holder).
            conn.log("warning", "cannot take back a stream written over: stopping it",
                     error=str(exc)[:300], source=source)
            conn.lose("written over, not taken back")
            return False
        if stopped:  # the write set STOPPED: released now with our checkpoint
            conn.drain_to(None, STOPPED)
        return stopped is not None

    async def before_release(self, conn: Connection, lost: LeaseLost, source: str) -> bool:
        """Take back a stream on its way out whose write ``lost`` found written over, so that
        its release (the caller's, to nobody) writes its checkpoint; False if it is not
        ours to take or the write failed (the caller treats it as lost)."""
        if not ours_to_take(conn, lost):
            return False
        try:
            return await self._write(conn, source) is not None
        except HoldfastError as exc:
            conn.log("warning", "cannot take back a stream written over: not released",
                     error=str(exc)[:300], source=source)
            return False

    async def _write(self, conn: Connection, source: str) -> bool | None:
        """The take-back's write: whether the write over it set STOPPED (logged and counted;
        False also if it is ours already: an order twice, by its queue and its session);
        None if not tried (ended, or past its fence). Raises the store's errors."""
        cp, held = self.cp, conn.held
        sent = cp.mono()
        if not held.live or sent >= held.deadline():
            return None  # ended, or past its fence (its session may be dead)
        taken = await asyncio.get_running_loop().run_in_executor(
            cp.executor, cp.store.retake, held.lease)
        if taken is None:
            return False  # ours already: nothing written
        lease, stopped = taken
        held.renewed(lease, cp.fence_after(sent))
        cp.metrics.incr(names.METRIC_HOLDINGS_TAKEN_BACK)
        conn.log("error", "the stream's item was written over outside the protocol (an app's "
                 "PutItem of the whole item?): our holding and checkpoint written back; "
                 "update stream items with UpdateItem", checkpoint=held.checkpoint,
                 source=source, stopped=stopped)
        return stopped
