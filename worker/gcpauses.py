"""Garbage-collector pauses: the startup heap kept out of every full collection, and a log line
for a slow one.

A full (generation 2) collection stops every thread, the event loop and the session heartbeat
included, for as long as it walks every tracked object. The imports and clients a worker
starts with (botocore's models, Powertools, websockets: about 126,000 objects) live as long as
the process, yet each full collection walked them again: about 0.13 s each on this 2-core box,
on top of the streams' own objects (a 1.3 s pause at 5,000 streams tripped the watchdog).
``gc.freeze()`` once the worker is built moves them to the permanent generation, which
collections skip; nothing that can die is frozen this early, so nothing leaks. Later objects
(streams come and go) are never frozen: their cycles must stay collectable.

``watch`` logs every collection slower than a threshold, with its generation and length, so a
self-fence or a watchdog exit that follows one can be read in the log.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SLOW_GC_MS", "freeze_startup_heap", "watch"]

SLOW_GC_MS = 200


def freeze_startup_heap() -> int:
    """Collect once, then freeze what is left (the process's long-lived start); how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


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
