"""When a successor reads the table for its handoffs (``worker.warmups``): one read for all.

Each warm-up has windows of looks (right after READY: every ``every_ms`` for a while; a late
TAKE's: one look), and a warm-up dropped has one last look. One loop runs while any is
pending: every ``every_ms`` it reads every item due in one call (``read``, a ``BatchGetItem``
for up to 100) and hands each answer on (``found``, ``last_found``). With three workers
stopping at once, 20 warm handoffs each, a GetItem per warm-up made 67 of 300 miss the 3 s
READY wait. What the answers mean is the caller's; this module only says when to read what.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Looks"]

W = TypeVar("W")
Raw = Mapping[str, Any] | None  # an item as stored; None: no such item


class Looks(Generic[W]):
    """The windows of looks of the warm-ups ``W`` (identity: a new warm-up of the same
    stream is another), and the dropped ones' last looks (see the module)."""

    def __init__(self, *, read: Callable[[list[str]], Awaitable[Mapping[str, Raw]]],
                 current: Callable[[str], W | None],
                 found: Callable[[str, W, Raw], Awaitable[None]],
                 last_found: Callable[[str, str, Raw], Awaitable[None]],
                 mono: Callable[[], int], spawn: Callable[[Awaitable[None]], None],
                 sleep: Callable[[float], Awaitable[None]], every_ms: int) -> None:
        self.read, self.current, self.found, self.last_found = read, current, found, last_found
        self.mono, self.spawn, self.sleep, self.every_ms = mono, spawn, sleep, every_ms
        self._windows: dict[str, tuple[W, int, int]] = {}  # the warm-up, first look, last look
        self._last: dict[str, str] = {}  # dropped warm-ups: the holder each was for
        self._running = False

    def window(self, conn_id: str, warm: W, begin_ms: int, end_ms: int) -> None:
        """Look for ``warm``'s transfer every ``every_ms`` from ``begin_ms`` until a look at
        or past ``end_ms`` (at least once), with the others due."""
        self._windows[conn_id] = (warm, begin_ms, end_ms)
        self._keep_running()

    def last(self, conn_id: str, holder: str) -> None:
        """One last look at ``conn_id``, a warm-up for ``holder`` dropped: with the next read."""
        self._last[conn_id] = holder
        self._keep_running()

    def pending(self, conn_id: str) -> bool:
        """A window of ``conn_id`` is open."""
        return conn_id in self._windows

    def _keep_running(self) -> None:
        if not self._running:
            self._running = True
            self.spawn(self._run())

    def _due(self, now: int) -> dict[str, W]:
        """The warm-ups to read now; windows past their last look, or whose warm-up is no
        longer current (taken, aborted, timed out), are closed."""
        due: dict[str, W] = {}
        for conn_id, (warm, begin, end) in list(self._windows.items()):
            if self.current(conn_id) is not warm:
                del self._windows[conn_id]
            elif now >= begin:
                due[conn_id] = warm
                if now >= end:  # its last look (one not read: the caller may open another)
                    del self._windows[conn_id]
        return due

    async def _run(self) -> None:
        try:
            while self._windows or self._last:
                await self.sleep(self.every_ms / 1000)
                due = self._due(self.mono())
                last, self._last = self._last, {}
                if not due and not last:
                    continue
                read = await self.read(list(due.keys() | last.keys()))
                for conn_id, warm in due.items():
                    if conn_id in read:  # not read: looked for again next time
                        self.spawn(self.found(conn_id, warm, read[conn_id]))
                for conn_id, holder in last.items():
                    if conn_id in read:  # not read: the sweep finds it if it needs one
                        self.spawn(self.last_found(conn_id, holder, read[conn_id]))
        finally:
            self._running = False
