"""Child processes of the local AWS: started in their own process group, waited on, reaped."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Final, TypeVar

log = logging.getLogger(__name__)

_P = TypeVar("_P")

__all__ = ["PORT_ATTEMPTS", "Child", "free_port", "listen_on_free_port", "wait_for_port"]

_PR_SET_PDEATHSIG = 1
# How many ports a server is started on before its failure is final: ``free_port``'s port is
# free when probed, not when the child binds it (an outbound connection's ephemeral port, or a
# socket another process bound, may take it in between); the child then dies at once. Not
# covered: a port taken by another *listening* server (two parallel picks of one port by the
# kernel's random choice): it answers ``wait_for_port`` for our child.
PORT_ATTEMPTS: Final = 3


# Loaded before any fork: the child must not dlopen between fork and exec.
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """Linux: SIGTERM this child when its parent dies, even by SIGKILL (no orphaned servers)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks; we only bind loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """True once something accepts on 127.0.0.1:port; False on timeout or if ``proc`` died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


def listen_on_free_port(start: Callable[[int], _P],
                        proc_of: Callable[[_P], subprocess.Popen[bytes] | None],
                        timeout_s: float, *, attempts: int = PORT_ATTEMPTS,
                        pick: Callable[[], int] = free_port) -> tuple[_P, int, bool]:
    """Start a server with ``start(port)`` on a port ``pick`` found free, and wait until it
    accepts: (server, port, True). A server that died before it accepted (most likely: the
    port was taken meanwhile) is started again on another port, ``attempts`` times; one
    still running but not accepting after ``timeout_s`` is not (its log says why). The last
    try's server comes back with False."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    for attempt in range(1, attempts + 1):
        port = pick()
        server = start(port)
        proc = proc_of(server)
        if wait_for_port(port, timeout_s, proc):
            return server, port, True
        if attempt == attempts or proc is None or proc.poll() is None:
            return server, port, False
        log.warning("a local server exited before listening on port %d (taken meanwhile?): "
                    "trying another port", port)
    raise AssertionError("unreachable: the last attempt returns")


class Child:
    """One server process whose output goes to a log file; ``stop`` leaves nothing behind."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = log_path.open("ab")
        # A session of its own, so stop() can signal the whole group (Java forks nothing,
        # but a wrapper script or werkzeug's reloader would).
        self.proc = subprocess.Popen(list(argv), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                     # Only a prctl call runs between fork and exec.
                                     preexec_fn=_die_with_parent)  # noqa: PLW1509

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
