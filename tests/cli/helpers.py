"""What the CLI tests share: run a command in-process, and ``ls --json``'s streams."""

from __future__ import annotations

import json
from typing import Any

import pytest

from holdfast.cli.main import main

__all__ = ["ls_json", "run"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``holdfast *argv`` in this process: its exit code, stdout and stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ls_json(capsys: pytest.CaptureFixture[str], prefix: str) -> dict[str, dict[str, Any]]:
    """``holdfast ls --json``'s streams whose id starts with ``prefix``, by id."""
    code, out, _ = run(capsys, "ls", "--json")
    assert code == 0
    return {s["id"]: s for s in json.loads(out)["streams"] if s["id"].startswith(prefix)}
