"""The worker's releases, gathered into batch calls while earlier ones are in flight.

A stop drains its streams together, and each finished drain asks for its release: one
UpdateItem each was the stop's bottleneck (a SIGTERMed worker with 1,000 streams wrote 130-240
releases a second on DynamoDB Local and left the rest to the reaper). Here a release waits for
nobody: with fewer than ``CALLS_IN_FLIGHT`` calls out it is sent at once; otherwise it joins
the next call, up to ``BATCH_LIMIT`` to one (``holdfast.core.batch_release``). A lone release
costs what it did; a burst of them, a twenty-fifth of the calls.
"""

from __future__ import annotations

import asyncio
from typing import Final

from holdfast.core.batch import BATCH_LIMIT, RenewMode
from holdfast.core.batch_release import ReleaseRequest, ReleaseResult, release_many
from holdfast.core.exceptions import HoldfastError, LossReason
from holdfast.core.store import LeaseStore
from holdfast.worker.iothreads import on_io_threads

__all__ = ["CALLS_IN_FLIGHT", "Releases"]

# Release calls out at once; their threads are the worker's IO pool's (16), which claims share.
# On DynamoDB Local 1,000 releases took 0.58 s in batches 4 at a time and 0.55 s 8 at a time
# (one table, nothing else running): more would take threads from claims for little.
CALLS_IN_FLIGHT: Final = 4


class Releases:
    """``release`` as ``LeaseStore.release`` (plain, no error), gathered (see the module)."""

    def __init__(self, store: LeaseStore, mode: RenewMode, *,
                 calls_in_flight: int = CALLS_IN_FLIGHT) -> None:
        self.store, self.mode, self.calls_in_flight = store, mode, calls_in_flight
        self._waiting: list[tuple[ReleaseRequest, asyncio.Future[ReleaseResult]]] = []
        self._calls: set[asyncio.Task[None]] = set()
        self.sent_calls = 0  # calls made, for tests and logs

    async def release(self, request: ReleaseRequest) -> LossReason | None:
        """Release one lease: None if released, else why it was not ours; raises what a
        single release raises when it could not be written (``StoreUnavailable``: retry)."""
        if self.mode == "single":  # one UpdateItem each: side by side on the IO threads
            r = request
            return await on_io_threads(self.store.release, r.lease, r.handled_seq,
                                       moved=r.moved, successor=r.successor)
        done: asyncio.Future[ReleaseResult] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, done))
        self._send()
        # A caller cancelled (the stop's deadline) still has its release sent: the lease
        # would otherwise wait for the reaper.
        result = await done
        if result.error is not None:
            raise result.error
        return result.lost

    def _send(self) -> None:
        while self._waiting and len(self._calls) < self.calls_in_flight:
            batch, self._waiting = self._waiting[:BATCH_LIMIT], self._waiting[BATCH_LIMIT:]
            call = asyncio.ensure_future(self._call(batch))
            self._calls.add(call)
            call.add_done_callback(self._sent)

    def _sent(self, call: asyncio.Task[None]) -> None:
        self._calls.discard(call)
        self._send()

    async def _call(self, batch: list[tuple[ReleaseRequest,
                                            asyncio.Future[ReleaseResult]]]) -> None:
        self.sent_calls += 1
        try:
            results = await on_io_threads(release_many, self.store, [r for r, _ in batch],
                                          self.mode)
        except BaseException as exc:
            # Never leave a caller waiting: a fault of the call (or of our code) is each
            # release's error, which the caller logs; the leases expire if nothing else frees them.
            error = exc if isinstance(exc, HoldfastError) else HoldfastError(
                f"release call failed: {exc!r}"[:300])
            for request, done in batch:
                if not done.done():
                    done.set_result(ReleaseResult(request.lease.conn_id, error=error))
            if not isinstance(exc, Exception):
                raise  # cancelled: the loop is closing
            return
        for (_, done), result in zip(batch, results, strict=True):
            if not done.done():
                done.set_result(result)
