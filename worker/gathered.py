"""Writes gathered into batch calls while earlier ones are in flight: the worker's releases
(``worker.endings``).

A stop drains its streams together, and each finished drain asks for its release: one
UpdateItem each was the stop's bottleneck (a SIGTERMed worker with 1,000 streams wrote 130-240
releases a second on DynamoDB Local and left the rest to the reaper). Here a write waits for
nobody: with fewer than ``calls_in_flight`` calls out it is sent at once; otherwise it joins
the next call, up to ``per_call`` to one (``holdfast.core.batch_endings``). A lone write costs
what it did; a burst of them, a twenty-fifth of the calls. (Transfers, gathered the same way,
showed no gain in the deploy bench and stay one write each.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final, Generic, TypeVar

from holdfast.core.batch import BATCH_LIMIT, RenewMode
from holdfast.core.exceptions import HoldfastError
from holdfast.worker.iothreads import IO_THREADS, on_io_threads

__all__ = ["CALLS_IN_FLIGHT", "STOP_CALLS_IN_FLIGHT", "Gathered"]

# Batch calls out at once; their threads are the worker's IO pool's (16), which claims share.
# A raw boto3 check on an empty DynamoDB Local wrote 1,000 releases in 0.58-1.38 s in batches
# 4 at a time and 0.55-0.81 s 8 at a time: more would take threads from claims for little.
CALLS_IN_FLIGHT: Final = 4
# Once the worker stops, it claims nothing more: its releases may take those threads. With 12
# threads writing single updates beside them (a successor's claims and checkpoints), 500
# releases took 1.16-1.21 s 4 calls at a time and 0.70-0.92 s 8 at a time (2026-12-07).
STOP_CALLS_IN_FLIGHT: Final = 8

Q = TypeVar("Q")
A = TypeVar("A")


class Gathered(Generic[Q, A]):
    """``write(request)`` through ``write_many`` (a list of requests -> their answers, in
    order, each answer carrying its own error), gathered (see the module). ``failed`` makes
    a request's answer when its whole call raised. ``mode="single"``: one request per call,
    as many calls out as the IO pool has threads (backends without PartiQL conditions)."""

    def __init__(self, write_many: Callable[[Sequence[Q]], list[A]],
                 failed: Callable[[Q, HoldfastError], A], *, mode: RenewMode = "batch",
                 calls_in_flight: int = CALLS_IN_FLIGHT) -> None:
        self.write_many, self.failed = write_many, failed
        self.per_call = BATCH_LIMIT if mode == "batch" else 1
        self.calls_in_flight = calls_in_flight if mode == "batch" else IO_THREADS
        self._waiting: list[tuple[Q, asyncio.Future[A]]] = []
        self._calls: set[asyncio.Task[None]] = set()

    async def write(self, request: Q) -> A:
        """The answer for ``request``. A caller cancelled (the stop's deadline) still has its
        write sent: a release now, rather than the reaper's after the session ends."""
        done: asyncio.Future[A] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, done))
        self._send()
        return await done

    def widen(self, calls_in_flight: int) -> None:
        """Allow up to ``calls_in_flight`` calls out from now on (never fewer than now), and
        send what waits for them."""
        self.calls_in_flight = max(self.calls_in_flight, calls_in_flight)
        self._send()

    async def settled(self) -> None:
        """Wait until no call is out or waiting."""
        while self._calls:
            await asyncio.wait(list(self._calls))

    def _send(self) -> None:
        while self._waiting and len(self._calls) < self.calls_in_flight:
            batch = self._waiting[:self.per_call]
            self._waiting = self._waiting[self.per_call:]
            call = asyncio.ensure_future(self._call(batch))
            self._calls.add(call)
            call.add_done_callback(self._sent)

    def _sent(self, call: asyncio.Task[None]) -> None:
        self._calls.discard(call)
        self._send()

    async def _call(self, batch: list[tuple[Q, asyncio.Future[A]]]) -> None:
        try:
            answers = await on_io_threads(self.write_many, [q for q, _ in batch])
        except BaseException as exc:
            # Never leave a caller waiting: a fault of the call (or of our code) is each
            # request's error, which the caller logs and handles as a write that failed.
            error = exc if isinstance(exc, HoldfastError) else HoldfastError(
                f"{type(exc).__name__}: {exc}"[:300])
            for request, done in batch:
                if not done.done():
                    done.set_result(self.failed(request, error))
            if not isinstance(exc, Exception):
                raise  # cancelled: the loop is closing
            return
        for (_, done), answer in zip(batch, answers, strict=True):
            if not done.done():
                done.set_result(answer)
