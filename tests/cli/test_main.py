"""``holdfast``'s entry point: what every command shares whatever it does."""

from __future__ import annotations

import subprocess
import sys

import pytest

from holdfast.cli.main import EXIT_BROKEN_PIPE
from tests.cli.helpers import run


class _Interrupted:
    """A stdin whose read is interrupted, as by Ctrl-C."""

    def read(self, _size: int = -1) -> str:
        raise KeyboardInterrupt


def test_ctrl_c_exits_130_without_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C during a command (here `start` reading its URL from stdin) exits 130, silent."""
    monkeypatch.setattr("sys.stdin", _Interrupted())
    try:
        result = run(capsys, "start", "cam-17", "-")
    except KeyboardInterrupt:  # escaped: the operator's terminal shows a traceback
        pytest.fail("KeyboardInterrupt escaped main()")
    assert result == (130, "", "")


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(
        aws_env: dict[str, str], extra: list[str]) -> None:
    """``holdfast ls | head``: the reader gone before the output is written ends the command
    with the shell's SIGPIPE code, 141, and no traceback (it printed one and exited 1; rich's
    table exited 1, "failed")."""
    proc = subprocess.Popen([sys.executable, "-m", "holdfast.cli.main", "ls", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # long before the command's imports are done and it writes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
