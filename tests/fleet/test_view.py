"""What ``holdfast up`` prints: event text as written, whatever brackets it holds."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
from rich.console import Console

from holdfast.fleet import cli
from holdfast.fleet.observer import StreamView
from holdfast.fleet.procs import Fleet
from holdfast.fleet.view import LiveView, PlainView, Snapshot
from holdfast.localaws import LocalAwsError

HINT = 'the local fleet needs moto: pip install ".[local]" in a Holdfast checkout (moto[server])'


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, highlight=False, width=200, color_system=None), out


def test_plain_lines_print_brackets_as_written() -> None:
    """A log line's "[/]" (markup raised on it) and an extra's "[local]" (markup ate it) are
    printed as written, in the line's style."""
    console, out = _console()
    view = PlainView(console)
    view.line(1.0, "    {\"msg\": \"tail [/] of a crash\"}", "red")
    view.line(2.0, HINT)
    assert "tail [/] of a crash" in out.getvalue() and HINT in out.getvalue()


def test_live_events_print_brackets_as_written() -> None:
    """The live view's event log shows the same text, its style applied around it."""
    console, out = _console()
    view = LiveView(console)
    try:
        view.line(1.0, HINT, "red")
        view.line(2.0, "scan failed: [/] [bold]", "")
        view.refresh(Snapshot(3.0, {}, {}, [], "t"))
    finally:
        view.close()
    assert HINT in out.getvalue() and "scan failed: [/] [bold]" in out.getvalue()


def test_the_status_after_the_stop_says_so() -> None:
    """The last scan, after the stop, is labelled so and printed even within the status
    period: "0/12 started streams owned" just before PASS read like a failure. A scan while
    every worker happens to be down (killed by a scenario) is a status like any other."""
    streams = [StreamView(f"s{i}", "STARTED", None, 1, 5, None, "RELEASED") for i in range(2)]
    console, out = _console()
    view = PlainView(console)
    view.refresh(Snapshot(8.0, {"w1": "running"}, {"w1": 2}, streams, "t"))
    view.refresh(Snapshot(9.0, {"w1": "exited 0"}, {}, streams, "t", after_stop=True))
    assert "status after the stop: 0/2 started streams still owned" in out.getvalue()
    console, out = _console()
    PlainView(console).refresh(Snapshot(9.0, {"w1": "exited -9"}, {}, streams, "t"))
    assert "status: 0/2 started streams owned" in out.getvalue()


def test_a_fleet_that_cannot_start_names_the_extra_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`holdfast up` without the local extra prints the hint whole (`".[local]"`), exit 3,
    and no "stopping: workers first" line for workers it never started."""
    def no_moto(self: Fleet) -> None:
        raise LocalAwsError(HINT)

    monkeypatch.setattr(Fleet, "start_aws", no_moto)
    monkeypatch.setattr(cli, "_install_signals", lambda stop: None)
    parser = argparse.ArgumentParser()
    cli.FLEET_COMMANDS["up"][1](parser)
    args = parser.parse_args(["--run-dir", str(tmp_path / "run"), "--plain"])
    assert cli.FLEET_COMMANDS["up"][2](args) == 3
    printed = capsys.readouterr().out
    assert f"cannot start the fleet: {HINT}" in printed.replace("\n", " ")
    assert "workers first" not in printed
