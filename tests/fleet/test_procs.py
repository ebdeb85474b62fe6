"""What the fleet reads of a child process: a worker's start line, the report of a crash (a
process record and a log file only), and whether it is paused."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from holdfast.fleet.procs import Proc


def _proc(tmp_path: Path, log: str | None) -> Proc:
    path = tmp_path / "w1.log"
    if log is not None:
        path.write_text(log)
    return Proc("w1", ["python", "-m", "worker"], path, {})


def test_a_worker_has_started_once_its_log_says_so(tmp_path: Path) -> None:
    """Started: the log holds the "worker started" line; not before, nor without a log."""
    assert not _proc(tmp_path / "none", None).worker_started()
    assert not _proc(tmp_path, '{"message":"session started"}\n').worker_started()
    assert _proc(tmp_path, '{"message":"worker started","worker_id":"w1"}\n').worker_started()


def test_a_crash_line_names_the_worker_its_code_log_and_tail(tmp_path: Path) -> None:
    """The crash line names the worker, its exit code and log file, then the log's last lines."""
    proc = _proc(tmp_path, "".join(f"line {i}\n" for i in range(20)))
    line = proc.crash_line()
    assert line.startswith(f"w1 exited on its own with code None (log {proc.log_path}):\n")
    assert line.endswith("line 19") and "line 12" in line and "line 11" not in line


def test_a_sigstopped_process_is_paused_until_sigcont(tmp_path: Path) -> None:
    """SIGSTOP marks it paused (the live view said "stopping" of a hung worker), SIGCONT
    clears it."""
    proc = Proc("w1", [sys.executable, "-c", "import time; time.sleep(30)"],
                tmp_path / "w1.log", dict(os.environ)).start()
    try:
        proc.signal(signal.SIGSTOP)
        assert proc.paused and proc.alive()
        proc.signal(signal.SIGCONT)
        assert not proc.paused
    finally:
        proc.signal(signal.SIGKILL)
        assert proc.proc is not None
        proc.proc.wait(10)
