"""The public API (``holdfast/__init__.py``): what the docs import from ``holdfast`` is
exported and resolves, and the API reference lists every export."""

from __future__ import annotations

import re
from pathlib import Path

import holdfast

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_name_the_docs_import_from_holdfast_is_public() -> None:
    """Each ``from holdfast import X`` in the README and the docs names an export that
    resolves (a user copies these lines)."""
    imported = {(doc.relative_to(ROOT).as_posix(), name.strip())
                for doc in DOCS
                for names in re.findall(r"from holdfast import ([\w, ]+)", doc.read_text())
                for name in names.split(",") if name.strip()}
    assert imported
    missing = sorted((doc, name) for doc, name in imported if name not in holdfast.__all__)
    assert missing == []
    for _, name in imported:
        assert getattr(holdfast, name) is not None


def test_the_api_reference_lists_every_export() -> None:
    """docs/reference/api.md has a row for each name ``holdfast`` exports."""
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    assert [n for n in holdfast.__all__ if f"| `{n}` |" not in text] == []


def test_the_version_is_the_packages() -> None:
    """holdfast.__version__ (kept in the file: the Lambda asset carries no package metadata)
    says what pyproject.toml does."""
    import tomllib
    from pathlib import Path

    import holdfast

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                            .read_text())["project"]
    assert holdfast.__version__ == project["version"]
