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

Stuck in a handler call (the loop's stack holds ``handler.call_once``), the stream of that call
is parked first (``park``: its give-up written from this thread, ``worker.endings``), with the
stuck seq and the blocking line as ``last_error``: its next holder would otherwise meet the same
message and die the same way, and the fleet crash-looped one worker after another. The park is
given ``PARK_WAIT_S`` at most, and never past the fence's ``margin_ms`` (less one check): from
there another worker may hold the stream, and the blocked handler must be gone by then (a slow,
throttled park write kept it running for up to 2 s past the fence). The exit follows whatever
the park did.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from holdfast.worker.handler import Message, call_once
from holdfast.worker.loopclock import LoopClock

__all__ = ["EXIT_CODE", "PARK_WAIT_S", "Watchdog", "stuck_in_call"]

EXIT_CODE = 70  # EX_SOFTWARE: an internal error, not a clean stop
PARK_WAIT_S = 2.0  # the stuck stream's park before the exit: a DynamoDB write, usually ms


def stuck_in_call(frame: FrameType | None) -> Message | None:
    """The message of the handler call on the stack from ``frame`` outwards, if any."""
    while frame is not None:
        if frame.f_code is call_once.__code__:
            message = frame.f_locals.get("message")
            return message if isinstance(message, Message) else None
        frame = frame.f_back
    return None


def _exit(code: int) -> NoReturn:
    sys.stderr.flush()
    os._exit(code)


class Watchdog:
    """``deadline()`` is the earliest fence deadline (monotonic ms) of the streams held now."""

    def __init__(self, deadline: Callable[[], int], clock: LoopClock, *,
                 stall_ms: int = 1000, check_s: float = 0.1,
                 exit: Callable[[int], object] = _exit,
                 park: Callable[[Message, str], object] | None = None,
                 flush: Callable[[], object] | None = None, margin_ms: int = 0) -> None:
        self.deadline, self.clock, self.mono, self.exit = deadline, clock, clock.mono, exit
        # ``flush``: the worker's metrics, printed before the exit (what was counted since
        # the last flush, the park's give-up with it, would die with the process).
        self.park, self.flush = park, flush
        self.stall_ms, self.check_s = stall_ms, check_s
        # Past fence + margin another worker may deliver the stream (``rules.LeaseTiming``).
        self.margin_ms = margin_ms
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
        frame = sys._current_frames().get(self.clock.loop_thread or -1)
        where = self._where(frame)
        sys.stderr.write(f"holdfast watchdog: event loop blocked for {stuck_ms} ms, "
                         f"{now - fence} ms past a fence deadline: exiting {EXIT_CODE} so no "
                         "handler goes on without its lease\n" + where)
        message = stuck_in_call(frame)
        if message is not None and self.park is not None:
            left_s = (fence + self.margin_ms - now) / 1000 - self.check_s
            self._park(message, stuck_ms, where, min(PARK_WAIT_S, max(0.0, left_s)))
        if self.flush is not None:
            try:
                self.flush()
            except Exception as exc:  # the exit goes on
                sys.stderr.write(f"holdfast watchdog: metrics not flushed: {exc!r}\n")
        self.exit(EXIT_CODE)
        return True

    def _park(self, message: Message, stuck_ms: int, where: str, wait_s: float) -> None:
        last = where.strip().splitlines()[-2:]  # the innermost frame: file, line and code
        why = (f"the handler blocked the event loop for {stuck_ms} ms on seq {message.seq}, "
               f"past the fence; the worker exited {EXIT_CODE}. Blocked at: "
               + " ".join(line.strip() for line in last))
        parking = threading.Thread(target=self._park_now, args=(message, why),
                                   name="holdfast-watchdog-park", daemon=True)
        parking.start()
        parking.join(wait_s)

    def _park_now(self, message: Message, why: str) -> None:
        try:
            assert self.park is not None
            self.park(message, why)
        except Exception as exc:  # the exit goes on: the sweeper recovers the stream instead
            sys.stderr.write(f"holdfast watchdog: could not park {message.conn_id}: "
                             f"{type(exc).__name__}: {exc}\n")
        else:
            sys.stderr.write(f"holdfast watchdog: parked {message.conn_id} on seq "
                             f"{message.seq}\n")

    @staticmethod
    def _where(frame: FrameType | None) -> str:
        """Where the loop is stuck (its thread's stack, innermost last): what blocked it."""
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
