"""When a successor reads the table for its handoffs: windows of looks and last looks, one
read for all due, on an injected clock (no DynamoDB, no waiting)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any

from holdfast.worker.looks import Looks


class _Table:
    """A fake table and clock: ``sleep`` advances the clock; each read is recorded."""

    def __init__(self, items: dict[str, Any], *, unread: set[str] | None = None) -> None:
        self.items, self.unread = items, unread or set()
        self.now = 0
        self.reads: list[list[str]] = []
        self.found: list[tuple[str, object, Any]] = []
        self.last_found: list[tuple[str, str, Any]] = []
        self.current: dict[str, object] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.taken_after_read = 0  # "b" is taken (no longer current) after this read

    async def read(self, ids: list[str]) -> Mapping[str, Any]:
        self.reads.append(sorted(ids))
        if len(self.reads) == self.taken_after_read:
            self.current.pop("b", None)
        return {c: self.items.get(c) for c in ids if c not in self.unread}

    async def sleep(self, seconds: float) -> None:
        self.now += round(seconds * 1000)
        await asyncio.sleep(0)

    async def on_found(self, conn_id: str, warm: object, raw: Any) -> None:
        self.found.append((conn_id, warm, raw))

    async def on_last(self, conn_id: str, holder: str, raw: Any) -> None:
        self.last_found.append((conn_id, holder, raw))

    def spawn(self, aw: Awaitable[None]) -> None:
        async def run() -> None:
            await aw
        self.tasks.append(asyncio.ensure_future(run()))

    def looks(self) -> Looks[object]:
        return Looks[object](read=self.read, current=self.current.get, found=self.on_found,
                             last_found=self.on_last, mono=lambda: self.now, spawn=self.spawn,
                             sleep=self.sleep, every_ms=25)

    async def settle(self) -> None:
        while not all(t.done() for t in self.tasks):
            await asyncio.gather(*self.tasks)


async def test_warm_ups_due_together_and_last_looks_share_one_read() -> None:
    """Two windows due at once and a dropped warm-up's last look: one read of all three,
    each answer handed to its own callback."""
    table = _Table({"a": {"x": 1}, "b": None, "gone": {"x": 2}})
    looks = table.looks()
    warm_a, warm_b = object(), object()
    table.current.update(a=warm_a, b=warm_b)
    looks.window("a", warm_a, 0, 0)
    looks.window("b", warm_b, 0, 0)
    looks.last("gone", "holder-1")
    await table.settle()
    assert table.reads == [["a", "b", "gone"]]
    assert table.found == [("a", warm_a, {"x": 1}), ("b", warm_b, None)]
    assert table.last_found == [("gone", "holder-1", {"x": 2})]


async def test_a_window_looks_every_period_until_its_end_and_closes_when_not_current() -> None:
    """From begin to end every 25 ms (the end's look included); a warm-up taken meanwhile
    (no longer current) is not read again."""
    table = _Table({"a": None, "b": None})
    looks = table.looks()
    warm_a, warm_b = object(), object()
    table.current.update(a=warm_a, b=warm_b)
    looks.window("a", warm_a, 50, 100)
    looks.window("b", warm_b, 0, 1000)
    table.taken_after_read = 3
    await table.settle()
    assert table.reads == [["b"], ["a", "b"], ["a", "b"], ["a"]]
    assert not looks.pending("a") and not looks.pending("b")


async def test_a_window_not_read_is_looked_for_again_a_last_look_is_not() -> None:
    """An item the read did not return (throttled): its window looks again next period; a
    last look is one read, whatever it returned (the sweep finds what it missed)."""
    table = _Table({"a": None, "gone": None}, unread={"a", "gone"})
    looks = table.looks()
    warm = object()
    table.current["a"] = warm
    looks.window("a", warm, 0, 50)
    looks.last("gone", "h")
    await table.settle()
    assert table.reads == [["a", "gone"], ["a"]]
    assert table.found == [] and table.last_found == []
