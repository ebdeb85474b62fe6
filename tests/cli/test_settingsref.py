"""``holdfast settings -o FILE``: where it writes, and what it refuses (the page itself is
checked in tests/core/test_settings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import run


def test_a_directory_or_a_missing_parent_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o naming a directory, or a file in a directory that does not exist: one line on
    stderr, exit 2, and no directory created; a file in an existing one is written."""
    for target in (tmp_path, tmp_path / "missing" / "dir" / "s.md"):
        code, _, err = run(capsys, "settings", "-o", str(target))
        assert code == 2 and err.count("\n") == 1 and f"cannot write {target}" in err
    assert not (tmp_path / "missing").exists()
    assert run(capsys, "settings", "--markdown", "-o", str(tmp_path / "s.md"))[0] == 0
    assert (tmp_path / "s.md").read_text().startswith("# Settings")
