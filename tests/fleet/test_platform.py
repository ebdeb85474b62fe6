"""Which exits the local fleet's platform reports: crashes yes, our graceful stops no."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from holdfast.fleet.platform import exited_unexpectedly
from holdfast.fleet.procs import Proc

# Exits 0 on SIGTERM, like a worker that released its streams.
_GRACEFUL = ("import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
             "print('up', flush=True)\ntime.sleep(60)\n")


def _child(tmp_path: Path, name: str) -> Proc:
    proc = Proc(name, [sys.executable, "-c", _GRACEFUL], tmp_path / f"{name}.log", {}).start()
    deadline = time.monotonic() + 10
    while b"up" not in proc.log_path.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def test_only_an_exit_we_did_not_ask_for_is_reported(tmp_path: Path) -> None:
    """Our SIGTERM then exit 0: not reported; SIGKILL or exiting non-zero: reported."""
    graceful, killed = _child(tmp_path, "graceful"), _child(tmp_path, "killed")
    try:
        assert not exited_unexpectedly(graceful) and not exited_unexpectedly(killed)
        graceful.signal(signal.SIGTERM)
        killed.signal(signal.SIGKILL)
        assert graceful.stop(10) == 0 and killed.stop(10) == -9
        assert not exited_unexpectedly(graceful)
        assert exited_unexpectedly(killed)
    finally:
        graceful.stop(0)
        killed.stop(0)
