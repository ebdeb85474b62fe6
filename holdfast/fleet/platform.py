"""The local fleet's "platform": a worker that exits unexpectedly is reported stopped, as ECS
reports a STOPPED task, through the taskstopped Lambda's own code.

Unexpected: exited, and not by the graceful stop we asked for (our SIGTERM, then exit 0). A
crash, a SIGKILL (the scenario's too) or a non-zero exit after SIGTERM is reported; its session
is declared dead at once and its streams are released, with no TTL to wait out. A SIGSTOPped
(hung) worker has not exited, so it is not reported: its session's TTL finds it, as on ECS.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from holdfast.core.store import wall_clock_ms
from holdfast.fleet.procs import Fleet, Proc

__all__ = ["PlatformReporter", "Report", "exited_unexpectedly"]

POLL_S = 0.05  # ECS takes seconds to report a stopped task; locally we are quicker


def exited_unexpectedly(proc: Proc) -> bool:
    """True once ``proc`` exited other than by our SIGTERM and a clean exit."""
    code = proc.returncode()
    return code is not None and not (proc.termed and code == 0)


@dataclass(frozen=True, slots=True)
class Report:
    """One report: which worker, its exit code, what was done, and how long the call took."""

    worker_id: str
    exit_code: int | None
    text: str
    took_s: float
    at_ms: int  # wall time of the report (when the exit was noticed)
    ok: bool = True


class PlatformReporter:
    """Polls the fleet's workers in a thread; reports each unexpected exit once."""

    def __init__(self, fleet: Fleet, *, on_report: Callable[[Report], None] | None = None,
                 poll_s: float = POLL_S) -> None:
        self.fleet = fleet
        self.on_report = on_report
        self.poll_s = poll_s
        self.reports: list[Report] = []
        self._done: set[int] = set()  # pids already reported
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._deps: object | None = None

    def start(self) -> PlatformReporter:
        self._thread = threading.Thread(target=self._run, name="platform-reporter",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before the fleet stops its workers: shutdown exits are ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        self.warm_up()
        while not self._stop.wait(self.poll_s):
            self.check()

    def warm_up(self) -> None:
        """Build the client and open its connection now, not at the first crash (a cold
        boto3 client and a first request cost ~1 s locally; a warm Lambda has neither)."""
        from holdfast.lambdas.taskstopped.handler import deps_for_env

        try:
            deps = deps_for_env(self.fleet.env)
            deps.sessions.get("platform-warm-up")  # a read of an id no worker has
        except Exception:  # the first report builds them again and says what failed
            return
        self._deps = deps

    def check(self) -> list[Report]:
        """Report every worker that exited unexpectedly since the last check."""
        out = []
        for proc in list(self.fleet.workers.values()):
            if proc.pid in self._done or not exited_unexpectedly(proc):
                continue
            self._done.add(proc.pid)
            report = self.report(proc.name, self.fleet.env, proc.returncode())
            self.reports.append(report)
            out.append(report)
            if self.on_report is not None:
                self.on_report(report)
        return out

    def report(self, worker_id: str, env: Mapping[str, str], code: int | None) -> Report:
        from holdfast.lambdas.taskstopped.handler import (
            TaskStoppedDeps,
            deps_for_env,
            report_stopped,
        )

        at = wall_clock_ms()
        t0 = time.monotonic()
        try:
            if not isinstance(self._deps, TaskStoppedDeps):
                self._deps = deps_for_env(env)
            out = report_stopped(worker_id, env, reason=f"worker exited with code {code}",
                                 stopped_at_ms=at, deps=self._deps)
        except Exception as exc:  # the TTL path still frees its streams: report, go on
            return Report(worker_id, code, f"{type(exc).__name__}: {exc}",
                          time.monotonic() - t0, at, ok=False)
        return Report(worker_id, code, out.describe(), time.monotonic() - t0, at)
