"""Garbage-collector pauses: the startup heap frozen, slow collections reported."""

from __future__ import annotations

import gc
import itertools

from holdfast.worker import gcpauses


def test_freezing_moves_the_heap_out_of_collections() -> None:
    """After freeze_startup_heap the objects alive now are skipped by every collection."""
    try:
        frozen = gcpauses.freeze_startup_heap()
        assert frozen > 1000 and gc.get_freeze_count() == frozen
        assert sum(gc.get_count()) < frozen  # what collections still walk is what came later
    finally:
        gc.unfreeze()


def test_only_slow_collections_are_reported() -> None:
    """A collection over the threshold is reported with its generation and length; a fast
    one is not (an injected clock: 0.5 s for the first, 0.01 s for the second)."""
    ticks = itertools.chain([0.0, 0.5, 1.0, 1.01], itertools.repeat(2.0))
    reports: list[tuple[int, float, int]] = []
    hook = gcpauses.watch(lambda g, ms, n: reports.append((g, ms, n)), slow_ms=200,
                          clock=lambda: next(ticks))
    try:
        gc.collect(2)
        gc.collect(0)
    finally:
        gc.callbacks.remove(hook)
    assert len(reports) == 1
    generation, ms, _ = reports[0]
    assert generation == 2 and round(ms) == 500
