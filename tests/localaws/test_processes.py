"""Local servers start on a port found free; one whose port was taken before it could bind is
started again on another port, a bounded number of times; one that hangs is not retried."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from holdfast.localaws.processes import PORT_ATTEMPTS, Child, free_port, listen_on_free_port

# Binds the port it is given, listens, then waits to be stopped.
_SERVER = ("import socket, sys, time; s = socket.socket(); "
           "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(60)")
# Runs without ever listening.
_SILENT = "import time; time.sleep(60)"


@pytest.fixture
def taken() -> Iterator[int]:
    """A port bound by us and not listening: a server's bind on it fails, a connect too."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


class _Starts:
    """Starts ``code`` as a child per port and remembers each, to stop them all."""

    def __init__(self, tmp_path: Path, code: str) -> None:
        self.tmp_path, self.code, self.children = tmp_path, code, list[Child]()

    def __call__(self, port: int) -> Child:
        child = Child("server", [sys.executable, "-c", self.code, str(port)],
                      self.tmp_path / f"server-{len(self.children)}.log")
        self.children.append(child)
        return child

    def stop(self) -> None:
        for child in self.children:
            child.stop()


def test_a_server_whose_port_was_taken_is_started_on_another(tmp_path: Path,
                                                             taken: int) -> None:
    """The first port was taken between the probe and the bind: the server died, and is up
    on the next port tried."""
    picks = iter([taken, free_port()])
    starts = _Starts(tmp_path, _SERVER)
    try:
        child, port, up = listen_on_free_port(starts, lambda c: c.proc, 10,
                                              pick=lambda: next(picks))
        assert up and port != taken and child.alive() and len(starts.children) == 2
        assert not starts.children[0].alive()
    finally:
        starts.stop()


def test_ports_taken_every_time_give_up_after_the_attempts(tmp_path: Path, taken: int) -> None:
    """Every port tried was taken: ``PORT_ATTEMPTS`` servers started, then False."""
    starts = _Starts(tmp_path, _SERVER)
    try:
        child, port, up = listen_on_free_port(starts, lambda c: c.proc, 10, pick=lambda: taken)
        assert not up and port == taken and len(starts.children) == PORT_ATTEMPTS
        assert child is starts.children[-1]
    finally:
        starts.stop()


def test_a_server_running_but_not_listening_is_not_retried(tmp_path: Path) -> None:
    """A server alive past the timeout without listening: one start, False (its log says
    why; another port would not help)."""
    starts = _Starts(tmp_path, _SILENT)
    try:
        child, _, up = listen_on_free_port(starts, lambda c: c.proc, 0.5)
        assert not up and child.alive() and len(starts.children) == 1
    finally:
        starts.stop()


def test_no_attempt_is_refused() -> None:
    """``attempts`` below 1 is a programming error, said at once."""
    with pytest.raises(ValueError, match="at least 1"):
        listen_on_free_port(lambda port: None, lambda c: None, 1, attempts=0)
