"""What a worker knows about one stream it holds: lease, fence deadline, checkpoint and state.

One ``HeldStream`` per claimed lease, owned by this module: the connection, the checkpointer,
the session keeper and the supervisor read it and change it only through the methods below, so
every write of the lease and the fence deadline is in this file. Its checkpoint is its
``cursor`` (``worker.delivery``), which only the connection moves.

States and the only transitions (anything else is a no-op that returns False: the checkpointer,
the fence watcher, the session keeper and the connection race to stop a stream, and whoever
comes first decides why it stopped)::

    CLAIMED --started--> RUNNING
    CLAIMED | RUNNING --drain--> DRAINING        finish the handler call in flight, then close
    live --abort--> ABORTED                      stop now (the shutdown budget ran out)
    live --fence--> FENCED                       past the fence deadline: may be someone else's
    live --lose--> LOST                          taken over, deleted, or our session is gone
    live --close--> RELEASED                     the connection has ended; hand the lease back

"live" is CLAIMED, RUNNING or DRAINING: the only states in which the lease is renewed, its
checkpoint written, and frames reach the handler. ABORTED, FENCED, LOST and RELEASED are final.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum

from holdfast.core.model import Lease
from holdfast.core.orders import ORDER_STOP, Order
from holdfast.worker.delivery import Delivery, Verdict

__all__ = ["NO_FENCE_MS", "REGRESSED", "RELEASE_ORDERED", "SHUTDOWN", "SHUTDOWN_TIMEOUT", "STOPPED",
           "HeldState", "HeldStream", "monotonic_ms", "ordered_reason"]

NO_FENCE_MS = 2**62  # a deadline that never comes (no session fence yet)
# Why a stream stops when its worker stops: drained, then aborted at the budget's end.
SHUTDOWN = "shutdown"
SHUTDOWN_TIMEOUT = "shutdown-timeout"
# Why a stream stops by its operator's word: STOPPED (an order, or a write that found it so),
# or a release order.
STOPPED = "stopped"
RELEASE_ORDERED = "release ordered"
# Why a stream still ours stops when someone moved its stored checkpoint past ours: released.
REGRESSED = "checkpoint moved past ours"


def ordered_reason(order: Order) -> str:
    """The drain reason of a stream ``order`` ends."""
    return STOPPED if order.verb == ORDER_STOP else RELEASE_ORDERED


def monotonic_ms() -> int:
    """The clock of every fence deadline."""
    return time.monotonic_ns() // 1_000_000


class HeldState(StrEnum):
    CLAIMED = "claimed"
    RUNNING = "running"
    DRAINING = "draining"
    ABORTED = "aborted"
    FENCED = "fenced"
    LOST = "lost"
    RELEASED = "released"


_LIVE = frozenset({HeldState.CLAIMED, HeldState.RUNNING, HeldState.DRAINING})


class HeldStream:
    """One held lease. ``session_fence`` returns the worker session's fence (monotonic ms)."""

    __slots__ = ("_fence_mono_ms", "_lease", "_reason", "_session_fence", "_state", "cursor")

    def __init__(self, lease: Lease, *, fence_mono_ms: int,
                 session_fence: Callable[[], int] = lambda: NO_FENCE_MS,
                 max_seq_jump: int | None = None) -> None:
        self._lease = lease
        self._fence_mono_ms = fence_mono_ms
        self._session_fence = session_fence
        self.cursor = Delivery(lease.last_seq, max_jump=max_seq_jump)  # the delivery rules
        self._state = HeldState.CLAIMED
        self._reason: str | None = None

    # -- reading -------------------------------------------------------------------------
    @property
    def lease(self) -> Lease:
        """The lease as last written by us (the release and every renewal start from it)."""
        return self._lease

    @property
    def fence_mono_ms(self) -> int:
        """This lease's own fence deadline (monotonic ms), moved by each renewal."""
        return self._fence_mono_ms

    def deadline(self) -> int:
        """Monotonic ms after which this stream must not be used: its own or its session's."""
        return min(self._fence_mono_ms, self._session_fence())

    @property
    def checkpoint(self) -> int | None:
        """The highest seq whose handler call has returned (None: no checkpoint yet)."""
        return self.cursor.checkpoint

    @property
    def state(self) -> HeldState:
        return self._state

    @property
    def stop_reason(self) -> str | None:
        """Why it was asked to stop ("shutdown", "fenced", "lost:<reason>"...); None if not."""
        return self._reason

    @property
    def stopping(self) -> bool:
        return self._reason is not None

    @property
    def live(self) -> bool:
        """Renewed, checkpointed and delivering: CLAIMED, RUNNING or DRAINING."""
        return self._state in _LIVE

    # -- transitions ---------------------------------------------------------------------
    def started(self) -> bool:
        """The connection task has begun."""
        return self._move({HeldState.CLAIMED}, HeldState.RUNNING, None)

    def drain(self, reason: str) -> bool:
        """Stop gracefully; a second drain keeps the first reason."""
        return self._move({HeldState.CLAIMED, HeldState.RUNNING}, HeldState.DRAINING, reason)

    def abort(self, reason: str) -> bool:
        """Stop now: no more handler calls, the call in flight is not checkpointed."""
        return self._move(_LIVE, HeldState.ABORTED, reason)

    def fence(self) -> bool:
        """Past the fence deadline: another worker may acquire the lease any moment."""
        return self._move(_LIVE, HeldState.FENCED, "fenced")

    def lose(self, why: str) -> bool:
        """Not ours any more (``why``: a ``LossReason`` or "session"): nothing more to write."""
        return self._move(_LIVE, HeldState.LOST, f"lost:{why}")

    def close(self) -> bool:
        """The connection has ended: renewals stop, the release carries the final checkpoint."""
        return self._move(_LIVE, HeldState.RELEASED, None)

    def _move(self, sources: frozenset[HeldState] | set[HeldState], target: HeldState,
              reason: str | None) -> bool:
        if self._state not in sources:
            return False
        self._state = target
        if reason is not None:
            self._reason = reason
        return True

    def renewed(self, lease: Lease, fence_mono_ms: int | None = None) -> bool:
        """A renewal (or checkpoint write) landed: keep ``lease``, and move the fence if given.

        Ignored once the stream is not live: the release already started from the old lease,
        which has the same owner and epoch. A lease of another stream or epoch is a bug.
        """
        if lease.conn_id != self._lease.conn_id or lease.epoch != self._lease.epoch:
            raise ValueError(f"renewal of {lease.conn_id} epoch {lease.epoch} does not match "
                             f"{self._lease.conn_id} epoch {self._lease.epoch}")
        if not self.live:
            return False
        self._lease = lease
        if fence_mono_ms is not None:
            self._fence_mono_ms = fence_mono_ms
        return True

    def admit(self, seq: int | None, now_mono_ms: int) -> Verdict:
        """What to do with a frame carrying ``seq`` at ``now_mono_ms`` (``worker.delivery``)."""
        return self.cursor.admit(seq, now_mono_ms, self.deadline())
