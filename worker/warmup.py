"""One warm-up of a handoff's successor: what it keeps for a stream between WARM (or RESERVE)
and TAKE, and the few things done with it (take its socket, close it, drop it).

Apart from ``worker.warmups``, which decides what happens to warm-ups (the handoff steps, the
looks in the table, the deadlines): this is the record each decision reads, with its socket's
helpers, and a test can build one without a worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from holdfast.core.model import StoredItem
from holdfast.worker.prefetch import Prefetch, Prefetched

__all__ = ["WarmUp"]


@dataclass
class WarmUp:
    """A socket opened from ``holder``'s position at ``epoch`` (or a slot kept), until TAKE."""

    prefetch: Prefetch | None  # None: reserved (one connection at a time), connected on TAKE
    holder: str
    epoch: int
    deadline_ms: int
    stored: StoredItem  # as the warm-up read it: what TAKE does not say
    owner: str  # our session's owner it was for: a TAKE to it is no TAKE to a newer one
    check_ms: int = 0  # when to look in the table for a TAKE that has not come

    @property
    def usable(self) -> bool:
        """A reservation, or a warm-up whose socket is still open."""
        return self.prefetch is None or self.prefetch.ws is not None

    async def taken(self) -> Prefetched | None:
        """The warm socket and its frames (None for a reservation: the stream connects)."""
        return None if self.prefetch is None else await self.prefetch.take()

    async def close(self) -> None:
        if self.prefetch is not None:
            await self.prefetch.close()

    def abort(self) -> None:
        """Drop the socket now, no closing handshake (``close`` then only cleans up)."""
        if self.prefetch is not None and self.prefetch.ws is not None:
            self.prefetch.ws.transport.abort()
