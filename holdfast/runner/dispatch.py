"""Between the shard reader and the invokers: which batch may be invoked next, and when.

The reader adds records as it reads them and never waits for an invocation; invoker threads
take batches. Like Lambda's ``ParallelizationFactor``, up to ``parallelization`` batches are
in flight at once, and records of one item (same ``Keys``) are never in two batches at once
nor delivered out of order: a record waits while an earlier record of its item is pending or
in flight. A batch holds records of one shard, at most ``batch_size``, and is released when
full or when the batching window since its oldest record has passed. With
``parallelization = 1`` this is exactly the one-batch-at-a-time mapping.

The scheduling is pure (clock injected); ``wait_batch`` only adds a condition variable.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Batch", "Dispatcher", "item_key"]


def item_key(record: dict[str, Any]) -> str:
    """The item a change record belongs to (its table key), as a comparable string."""
    return json.dumps(record.get("dynamodb", {}).get("Keys", {}), sort_keys=True, default=str)


@dataclass(frozen=True, eq=False)
class Batch:
    shard_id: str
    records: list[dict[str, Any]]
    keys: frozenset[str]


@dataclass
class _Entry:
    shard_id: str
    key: str
    record: dict[str, Any]
    added: float


class Dispatcher:
    """A FIFO of read records and the keys in flight; thread-safe."""

    def __init__(self, *, batch_size: int, window_s: float, parallelization: int = 1,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.batch_size = batch_size
        self.window_s = window_s
        self.parallelization = parallelization
        self.monotonic = monotonic
        self._pending: list[_Entry] = []
        self._in_flight: list[Batch] = []
        self._cond = threading.Condition()

    def add(self, shard_id: str, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        now = self.monotonic()
        with self._cond:
            self._pending += [_Entry(shard_id, item_key(r), r, now) for r in records]
            self._cond.notify_all()

    def take(self, *, flush: bool = False) -> Batch | None:
        """The next batch to invoke now, marked in flight (``done`` must follow), or None."""
        with self._cond:
            return self._take(flush)

    def done(self, batch: Batch) -> None:
        """``batch`` is delivered (or dropped): its items may go on."""
        with self._cond:
            self._in_flight = [b for b in self._in_flight if b is not batch]
            self._cond.notify_all()

    def next_deadline(self) -> float | None:
        """When the oldest pending record's batching window ends (monotonic s), if any."""
        with self._cond:
            return self._pending[0].added + self.window_s if self._pending else None

    def wait_batch(self, stop: threading.Event, max_wait_s: float = 0.25) -> Batch | None:
        """Block until a batch may be invoked (or ``stop``, or ``max_wait_s``)."""
        with self._cond:
            while not stop.is_set():
                batch = self._take(flush=False)
                if batch is not None:
                    return batch
                wait = max_wait_s
                if self._pending:
                    wait = min(wait, max(0.001, self._pending[0].added + self.window_s
                                         - self.monotonic()))
                if not self._cond.wait(wait):
                    return self._take(flush=False)
            return None

    def idle(self) -> bool:
        with self._cond:
            return not self._pending and not self._in_flight

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)

    def _take(self, flush: bool) -> Batch | None:
        if len(self._in_flight) >= self.parallelization or not self._pending:
            return None
        # Keys in flight, and keys with an earlier record left behind, wait their turn.
        blocked: set[str] = set().union(*(b.keys for b in self._in_flight))
        shard: str | None = None
        chosen: list[int] = []
        for i, entry in enumerate(self._pending):
            if entry.key in blocked:
                continue
            if shard is None:
                shard = entry.shard_id
            if entry.shard_id != shard:
                blocked.add(entry.key)  # an earlier record of another shard goes first
                continue
            chosen.append(i)
            if len(chosen) == self.batch_size:
                break
        if not chosen:
            return None
        full = len(chosen) == self.batch_size
        oldest = self._pending[chosen[0]].added
        if not (full or flush or self.monotonic() >= oldest + self.window_s):
            return None
        taken = set(chosen)
        records = [self._pending[i].record for i in chosen]
        keys = frozenset(self._pending[i].key for i in chosen)
        self._pending = [e for i, e in enumerate(self._pending) if i not in taken]
        batch = Batch(shard, records, keys)  # type: ignore[arg-type]
        self._in_flight.append(batch)
        return batch
