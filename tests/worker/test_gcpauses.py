"""Garbage-collector pauses: the startup heap frozen, slow collections reported."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools

from holdfast.worker import gcpauses


def test_freezing_moves_the_heap_out_of_collections() -> None:
    """After freeze_startup_heap the objects alive now are skipped by every collection."""
    try:
        frozen = gcpauses.freeze_startup_heap()
        # Not "== frozen": a frozen object freed by its refcount (another thread's) leaves
        # the permanent generation meanwhile (25 of 378,025 once in a loaded suite).
        assert frozen > 1000 and 0.9 * frozen < gc.get_freeze_count() <= frozen
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


async def test_survivors_are_frozen_and_thawed_on_schedule() -> None:
    """Every period what survived is frozen; at the thaw period it is unfrozen and collected
    in full first (injected sleep and clock: periods of 5 s, thaw after 10 s)."""
    ticks = itertools.count(0.0, 5.0)
    frozen_at_sleep: list[int] = []
    full: list[int] = []

    def count_full(phase: str, info: dict[str, object]) -> None:
        if phase == "start" and info.get("generation") == 2:
            full.append(len(frozen_at_sleep))

    async def sleep(_: float) -> None:
        frozen_at_sleep.append(gc.get_freeze_count())
        if len(frozen_at_sleep) > 3:
            raise asyncio.CancelledError

    gc.unfreeze()
    gc.callbacks.append(count_full)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await gcpauses.keep_frozen(period_s=5, thaw_s=10, sleep=sleep,
                                       clock=lambda: next(ticks))
    finally:
        gc.callbacks.remove(count_full)
        gc.unfreeze()
    assert frozen_at_sleep[0] == 0 and frozen_at_sleep[1] > 0  # frozen after one period
    assert 2 in full  # the thaw's full collection, after the second period (clock 10 s)
