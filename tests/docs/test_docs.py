"""The docs site and the README: built strictly, short, linked, and in step with the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from holdfast.cli.main import COMMANDS
from holdfast.core import names

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def test_readme_is_a_short_front_page_whose_links_resolve() -> None:
    """The README stays under 1,500 words and every relative link in it names a real file."""
    text = (REPO / "README.md").read_text()
    assert len(text.split()) <= 1500
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links
    missing = [link for link in links if "://" not in link and not (REPO / link).exists()]
    assert missing == []


def test_every_page_is_in_the_nav() -> None:
    """Each page under docs/ is reachable from mkdocs.yml's nav, and each nav entry exists."""
    nav = set(re.findall(r":\s+([\w/.-]+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.M))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages == nav


def test_metrics_reference_names_every_metric() -> None:
    """Every metric name defined in holdfast.core.names has a row in the metrics reference."""
    page = (DOCS / "reference" / "metrics.md").read_text()
    metrics = {v for k, v in vars(names).items() if k.startswith("METRIC_")}
    assert metrics and [m for m in sorted(metrics) if f"| `{m}` |" not in page] == []


def test_cli_reference_names_every_command() -> None:
    """Every `holdfast` subcommand has a row in the CLI reference."""
    page = (DOCS / "reference" / "cli.md").read_text()
    assert [c for c in sorted(COMMANDS) if f"| `holdfast {c}" not in page] == []


def test_glossary_defines_the_terms_the_docs_use() -> None:
    """Each core term is defined once, as a heading of the glossary."""
    page = (DOCS / "concepts" / "glossary.md").read_text()
    headings = re.findall(r"^## (.+)$", page, re.M)
    assert len(headings) == len(set(headings))
    for term in ("Stream", "Holding", "Session", "Lease", "Epoch", "Nudge", "Order", "Seed",
                 "Checkpoint", "Owner", "Incarnation", "Reaper", "Backstop"):
        assert term in headings, term


def test_docs_build_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` passes: no broken link, anchor or missing page."""
    pytest.importorskip("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started/handler.md"])
def test_the_handler_a_page_defines_is_the_one_its_commands_run(page: str) -> None:
    """Copied as they are, the page's code and commands fit: every ``myapp.handlers:NAME``
    names the function its example defines (a new user got exit 2 from the README's)."""
    text = (REPO / page).read_text()
    defined = set(re.findall(r"^async def (\w+)\(message: Message\)", text, re.MULTILINE))
    named = set(re.findall(r"myapp\.handlers:(\w+)", text))
    assert defined and named and named <= defined, (defined, named)
