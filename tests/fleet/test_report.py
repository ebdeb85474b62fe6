"""The verdict: missed seqs per stream and per-incident unowned figures."""

from __future__ import annotations

from rich.console import Console

from holdfast.fleet.recorder import Handled
from holdfast.fleet.report import Incident, check_seqs, summary_rows, summary_table


def h(conn: str, *seqs: int) -> list[Handled]:
    return [Handled(conn, s, "w", 0) for s in seqs]


def test_contiguous_with_duplicates_is_ok() -> None:
    """Repeats after a takeover are counted but are not misses."""
    check = check_seqs(h("a", 0, 1, 2, 2, 3), {"a": 3})["a"]
    assert check.ok and check.duplicates == 1 and (check.first, check.last) == (0, 3)


def test_gap_and_checkpoint_beyond_handled_are_misses() -> None:
    """A hole, or a checkpoint claiming seqs nobody handled, is a miss."""
    assert check_seqs(h("a", 0, 1, 3), {"a": 3})["a"].missing == [2]
    assert check_seqs(h("a", 0, 1), {"a": 3})["a"].missing == [2, 3]
    assert check_seqs([], {"a": 1})["a"].missing == [0, 1]


def test_summary_rows_and_table() -> None:
    """Per-incident max/p50 and misses; a stop incident is not 'never recovered'."""
    seqs = check_seqs(h("a", 0, 1, 3) + h("b", 0, 1), {"a": 3, "b": 1})
    kill = Incident("SIGKILL w1", 1.0, ["a", "b"], {"a": 4.0, "b": 2.0})
    stop = Incident("stop", 2.0, ["b"], expect_owner=False)
    rows = summary_rows([kill, stop], seqs)
    assert rows[0]["max_unowned_s"] == 4.0 and rows[0]["p50_unowned_s"] == 3.0
    assert rows[0]["missed"] == 1 and rows[1]["unrecovered"] == [] and rows[-1]["missed"] == 1
    assert Incident("x", 0, ["a"]).unrecovered() == ["a"]
    console = Console(width=120, record=True)
    console.print(summary_table(rows))
    assert "SIGKILL w1" in console.export_text()


def test_duplicates_are_one_run_total_not_repeated_per_event() -> None:
    """Event rows show no duplicates (counted per stream over the run); the total row does."""
    seqs = check_seqs(h("a", 0, 1, 1, 2, 2) + h("b", 0, 0, 1), {"a": 2, "b": 1})
    term = Incident("SIGTERM w3 (graceful stop)", 1.0, ["a", "b"], {"a": 0.1, "b": 0.1})
    kill = Incident("SIGKILL w1", 2.0, ["a", "b"], {"a": 1.0, "b": 1.0})
    rows = summary_rows([term, kill], seqs)
    assert [r["duplicates"] for r in rows] == [None, None, 3]
    console = Console(width=160, record=True)
    console.print(summary_table(rows))
    lines = console.export_text().splitlines()
    term_line = next(line for line in lines if "SIGTERM w3" in line)
    assert term_line.rstrip(" │").endswith("-")
    assert next(line for line in lines if "whole run" in line).rstrip(" │").endswith("3")
