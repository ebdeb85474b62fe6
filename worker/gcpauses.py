"""Garbage-collector pauses: the startup heap kept out of every full collection, and a log line
for a slow one.

A full (generation 2) collection stops every thread, the event loop and the session heartbeat
included, for as long as it walks every tracked object. The imports and clients a worker
starts with (botocore's models, Powertools, websockets: about 126,000 objects) live as long as
the process, yet each full collection walked them again: about 0.13 s each on this 2-core box,
on top of the streams' own objects (a 1.3 s pause at 5,000 streams tripped the watchdog).
``gc.freeze()`` once the worker is built moves them to the permanent generation, which
collections skip; nothing that can die is frozen this early, so nothing leaks.

The streams' own objects are long-lived too: at 5,000 streams a full collection came every
~5 s, took 0.26-0.74 s and collected almost nothing (3-15 objects), and the heartbeats it
delayed fenced the worker. ``keep_frozen`` freezes what has survived every ``period_s``, so a
full collection walks only what is new; an object that dies later is still freed by its
reference count at once, only garbage *cycles* among frozen objects wait, until the thaw
every ``thaw_s`` (unfreeze, one full collection, freeze again): one long pause in ten minutes
instead of one every five seconds.

``watch`` logs every collection slower than a threshold, with its generation and length, so a
self-fence or a watchdog exit that follows one can be read in the log.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["SLOW_GC_MS", "freeze_startup_heap", "keep_frozen", "watch"]

SLOW_GC_MS = 200


def freeze_startup_heap() -> int:
    """Collect once, then freeze what is left (the process's long-lived start); how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def keep_frozen(*, period_s: float = 5.0, thaw_s: float = 600.0,
                      sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                      clock: Callable[[], float] = time.monotonic) -> None:
    """Freeze the survivors every ``period_s``; thaw and collect every ``thaw_s``. Runs until
    cancelled (a task on the worker's loop)."""
    thawed = clock()
    while True:
        await sleep(period_s)
        if clock() - thawed >= thaw_s:
            gc.unfreeze()
            gc.collect()
            thawed = clock()
        gc.freeze()


def watch(report: Callable[[int, float, int], None], *, slow_ms: float = SLOW_GC_MS,
          clock: Callable[[], float] = time.perf_counter) -> Callable[[str, dict[str, Any]], None]:
    """Install a ``gc.callbacks`` hook calling ``report(generation, ms, collected)`` for each
    collection slower than ``slow_ms``; returns the hook (``gc.callbacks.remove`` undoes it)."""
    started: list[float] = []

    def hook(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[:] = [clock()]
        elif started:
            ms = (clock() - started.pop()) * 1000
            if ms >= slow_ms:
                report(int(info.get("generation", -1)), ms, int(info.get("collected", 0)))

    gc.callbacks.append(hook)
    return hook
