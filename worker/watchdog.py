"""The event-loop watchdog: a thread that ends the process when the loop is stuck past a fence.

The fence watcher and the delivery rules run on the event loop. A handler that blocks the
loop (``time.sleep``, a synchronous HTTP call, a CPU-bound parse) stops them all: past the
fence deadline another worker may own the stream while this one's handler is still working on
it. So a thread, which runs while the loop is blocked, watches the loop's clock
(``worker.loopclock``, stamped by the session keeper's loop task). When the loop has not
stamped for ``stall_ms`` and the earliest fence deadline of
the streams it holds has passed, the thread writes one line to stderr and exits with
``EXIT_CODE`` at once (``os._exit``: nothing on the blocked loop can run). To the fleet that
is a crash: the session stops heartbeating and the sweeper and the other workers recover its
streams.

A loop that is slow but not stuck keeps stamping, and the fence watcher fences on time; the
watchdog only acts when the loop cannot.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn

from holdfast.worker.loopclock import LoopClock

__all__ = ["EXIT_CODE", "Watchdog"]

EXIT_CODE = 70  # EX_SOFTWARE: an internal error, not a clean stop


def _exit(code: int) -> NoReturn:
    sys.stderr.flush()
    os._exit(code)


class Watchdog:
    """``deadline()`` is the earliest fence deadline (monotonic ms) of the streams held now."""

    def __init__(self, deadline: Callable[[], int], clock: LoopClock, *,
                 stall_ms: int = 1000, check_s: float = 0.1,
                 exit: Callable[[int], object] = _exit) -> None:
        self.deadline, self.clock, self.mono, self.exit = deadline, clock, clock.mono, exit
        self.stall_ms, self.check_s = stall_ms, check_s
        self._resumed_ms = clock.mono()  # the whole process last came back from a pause
        self._checked_ms: int | None = None  # when the thread last looked
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """Exit (and return True, if ``exit`` returns) when the loop is stuck past a fence."""
        now = self.mono()
        last, self._checked_ms = self._checked_ms, now
        if last is not None and now - last >= self.stall_ms:
            # This thread did not run either: the whole process was paused (SIGSTOP, a frozen
            # VM), not the loop blocked. Give the loop one stall period to catch up: it fences
            # its streams itself, and nothing past a fence reaches a handler.
            self._resumed_ms = now
            return False
        stuck_ms = now - max(self.clock.stamp_ms, self._resumed_ms)
        if stuck_ms < self.stall_ms:
            return False
        # The deadlines are read here, not stamped by the loop: a stream claimed and blocked
        # on between two beats would not be seen. A stuck loop changes nothing meanwhile; one
        # that just came back may be changing the streams under us: it is not stuck then.
        try:
            fence = self.deadline()
        except RuntimeError:  # "dictionary changed size during iteration"
            return False
        if now < fence:
            return False
        sys.stderr.write(f"holdfast watchdog: event loop blocked for {stuck_ms} ms, "
                         f"{now - fence} ms past a fence deadline: exiting {EXIT_CODE} so no "
                         "handler goes on without its lease\n" + self._where())
        self.exit(EXIT_CODE)
        return True

    def _where(self) -> str:
        """Where the loop is stuck (its thread's stack, innermost last): what blocked it."""
        frame = sys._current_frames().get(self.clock.loop_thread or -1)
        if frame is None:
            return ""
        return "blocked at:\n" + "".join(traceback.format_stack(frame, limit=12))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="holdfast-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.check_s):
            if self.check():
                return
