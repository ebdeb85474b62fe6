"""``holdfast upstream``'s arguments and start-up errors: one line and exit 2, no traceback."""

from __future__ import annotations

import socket

import pytest

from holdfast.cli.main import main


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Another socket listening on the port: a one-line error, exit 2."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["upstream", "--port", str(port)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and err.startswith("holdfast upstream: ")


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_is_a_usage_error(port: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """--port outside 0-65535 is refused at parsing (exit 2), before anything binds."""
    with pytest.raises(SystemExit) as exited:
        main(["upstream", "--port", port])
    assert exited.value.code == 2 and "--port" in capsys.readouterr().err


@pytest.mark.parametrize("rate", ["0", "nan", "inf", "-1"])
def test_a_rate_not_a_positive_number_is_one_line_on_stderr(
        capsys: pytest.CaptureFixture[str], rate: str) -> None:
    """--rate 0 (or nan, which passed "<= 0" and closed every connection saying nothing):
    one line on stderr (not stdout, where the URL goes), exit 2."""
    code = main(["upstream", "--rate", rate])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == "holdfast upstream: --rate must be a positive number\n"
