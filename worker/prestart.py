"""A new stream's start in one write: connect first, then claim with its first checkpoint.

A never-checkpointed stream's first seq is stored before its first handler call (its anchor,
``worker.checkpointer``), or a crash before the next checkpoint would let the next holder start
wherever the upstream is then. Written after the claim and the connect, that anchor was a second
write on every start's path: on a loaded machine half of "claimed -> first message" (0.4-0.5 s
p50 of a 30-stream burst, writes queued on DynamoDB Local; measured with the start-burst bench).

For a nudge that says the stream was just inserted (``REASON_INSERTED``), the claim first reads
the item (one strongly consistent read; skipped when the nudge carries the URL, which the
router adds only for an item it saw claimable, unchecked and not limited to one connection
(``holdfast.core.model.connects_before_claim``), the nudge is fresh
(``holdfast.core.nudge.url_if_fresh``) and the fleet default allows two connections: the read
was 66-102 ms p50 of a 30-stream burst's start), opens the upstream as a handoff's warm-up does
(``worker.prefetch``: frames are buffered, nothing reaches the handler), waits briefly for the
first frame, and acquires with that frame's seq - 1 as the first checkpoint
(``LeaseStore.acquire(anchor=...)``, written only if the item has none and still names the URL
connected to). The stream then starts on the open socket with what was buffered.

Any doubt falls back to the usual order (claim, connect, anchor) and costs nothing but the read:
an item that has a checkpoint or an owner, is not claimable yet, or allows one connection at a
time (two workers nudged for one stream would both connect before one lost the claim); a URL
refused or an upstream that fails or is slow to connect; no frame within
``FIRST_FRAME_WAIT_MS`` (the socket is still used, the anchor is written when a frame comes).
The socket is used only if the acquired lease says what the read said (the same URL, and the
anchor it asked for or still none); otherwise it is closed and the stream connects as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aws_lambda_powertools import Logger

from holdfast.core import rules
from holdfast.core.anchor import Anchor
from holdfast.core.model import Lease, connects_before_claim
from holdfast.core.store import LeaseStore
from holdfast.worker.context import ConnectionContext
from holdfast.worker.delivery import first_checkpoint
from holdfast.worker.iothreads import on_io_threads
from holdfast.worker.logs import WORKER_LOGGER
from holdfast.worker.prefetch import Prefetch, Prefetched
from holdfast.worker.protocol import checked

__all__ = ["CONNECT_FIRST_TIMEOUT_MS", "FIRST_FRAME_WAIT_MS", "Prestart", "prestart"]

logger = Logger(service=WORKER_LOGGER, child=True)

# How long the claim waits for the first frame: a feed that says something on connect does so
# within milliseconds; a quiet one is claimed anyway and anchored when it speaks. Under a
# 300-stream insert burst on the local fleet (2 cores, a frame every 100 ms per stream), 150 ms
# missed the first frame of 3-15 streams a run, each then waiting on a separate anchor write
# (3.7 s p99 in one run, DynamoDB Local stalled); 300 ms missed 0 and 3 (2026-12-07).
FIRST_FRAME_WAIT_MS: Final = 300
# The connect's bound before the claim goes ahead without it (the connection's own connect,
# after the claim, has the full open timeout and the reconnect back-off).
CONNECT_FIRST_TIMEOUT_MS: Final = 1_000


@dataclass
class Prestart:
    """An upstream opened before the claim, and the first checkpoint to claim with."""

    prefetch: Prefetch
    ws_url: str
    first_checkpoint: int | None

    @property
    def anchor(self) -> Anchor | None:
        """What the acquire writes as the first checkpoint, with the URL it came from."""
        return None if self.first_checkpoint is None else Anchor(self.first_checkpoint,
                                                                 self.ws_url)

    async def taken_by(self, lease: Lease) -> Prefetched | None:
        """The socket and its frames if ``lease`` (just acquired) is the stream as read: same
        URL, and the anchor asked for (or still none); else closed, and None."""
        if lease.ws_url == self.ws_url and lease.last_seq == self.first_checkpoint:
            return await self.prefetch.take()
        await self.close()
        return None

    async def close(self) -> None:
        await self.prefetch.close()


async def prestart(conn_id: str, owner: str, store: LeaseStore, ctx: ConnectionContext, *,
                   single_connection: bool, ws_url: str | None = None) -> Prestart | None:
    """Read ``conn_id`` and, if it is a new stream we may claim, connect to it and wait a moment
    for its first frame (see the module); None: claim as usual. ``single_connection``: the
    fleet default (``HOLDFAST_SINGLE_CONNECTION``), for an item that does not say.
    ``ws_url``: the URL the router saw in the new item, for an item it saw fit (no read)."""
    if ws_url is None or single_connection:
        # No URL, or the fleet default is one connection at a time: only the item can say
        # that this stream allows two (the nudge carries no ``single_connection``).
        ws_url = await _read_fit(conn_id, owner, store, single_connection)
    if ws_url is None:
        return None
    prefetch = Prefetch.for_stream(conn_id, ws_url, None, ctx)
    try:
        await prefetch.open(CONNECT_FIRST_TIMEOUT_MS / 1000)
        frame = await prefetch.first_frame(FIRST_FRAME_WAIT_MS / 1000)
        # A plugged-in protocol's odd seq (-3, True): anchored the usual way, if at all.
        seq = None if frame is None else checked(ctx.protocol.parse(frame)).seq
    except Exception as exc:  # refused URL, upstream down or slow, a protocol's bug
        await prefetch.close()
        logger.info("connect first: cannot connect before the claim, claiming first",
                    conn_id=conn_id, error=f"{type(exc).__name__}: {exc}"[:300])
        return None
    except BaseException:  # cancelled (the worker stops): no socket left behind
        await prefetch.close()
        raise
    return Prestart(prefetch, ws_url, first_checkpoint(seq))


async def _read_fit(conn_id: str, owner: str, store: LeaseStore,
                    single_connection: bool) -> str | None:
    """The item's URL if it may be connected before its claim (see the module), else None."""
    try:
        stored = await on_io_threads(store.read, conn_id)
    except Exception as exc:  # unreadable, throttled, malformed: the acquire will say
        logger.debug("connect first: cannot read the item", conn_id=conn_id, error=str(exc)[:200])
        return None
    if (stored is None
            or rules.claim_blocker(stored.item, store.clock(), store.skew_ms, owner) is not None
            or not connects_before_claim(stored.item, stored.single_connection,
                                         single_connection)):
        return None
    return stored.item.ws_url
