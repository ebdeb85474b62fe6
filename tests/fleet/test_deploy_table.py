"""The deploy scenario's summary table."""

from __future__ import annotations

from rich.console import Console

from holdfast.fleet.deploy_table import deploy_table
from tests.fleet.test_deploy import _report


def test_deploy_table_shows_every_figure() -> None:
    """The table names the style and every figure the brief asks for, and the steady gaps."""
    console = Console(width=140, record=True)
    console.print(deploy_table(_report([])))
    text = console.export_text()
    for words in ("one-at-a-time: 2 workers replaced, 4 streams", "mean 1.00, max 2",
                  "moved more than once", "onto an old worker", "p50 / p99 / max",
                  "delay a move added", "streams not moving", "duplicates", "lost seqs",
                  "unowned at the end"):
        assert words in text, words
