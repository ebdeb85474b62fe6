"""``holdfast``'s entry point: what every command shares whatever it does."""

from __future__ import annotations

import pytest

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
