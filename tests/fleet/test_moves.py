"""Rebalancing moves from worker logs, the balance band, and their summary rows."""

from __future__ import annotations

import json

from rich.console import Console

from holdfast.fleet.moves import (
    Move,
    balance_of,
    claims_from_logs,
    cut_short_note,
    duplicates_across,
    logged_unowned_s,
    moves_from_logs,
    percentile,
    unowned_stats,
)
from holdfast.fleet.recorder import Handled
from holdfast.fleet.report import Incident, check_seqs, summary_rows, summary_table


def line(msg: str, worker: str, conn: str, ms: int, **extra: object) -> str:
    stamp = f"2026-12-01 22:36:{ms // 1000:02d},{ms % 1000:03d}+0000"
    return json.dumps({"level": "INFO", "message": msg, "timestamp": stamp,
                       "worker_id": worker, "conn_id": conn, **extra})


def test_shed_then_claim_elsewhere_is_a_move() -> None:
    """A shed followed by another worker's claim is a move; its unowned_ms is kept."""
    lines = [line("claimed", "w1", "a", 1000, unowned_ms=5),
             line("shedding stream (rebalancing)", "w1", "a", 20_000),
             line("claimed", "w2", "a", 20_150, unowned_ms=120, moved_at_ms=1),
             line("shedding stream (draining)", "w2", "b", 21_000),
             "not json", '{"message": 3}']
    moves = moves_from_logs(lines)
    assert [(m.conn_id, m.src, m.dst, m.reason, m.unowned_ms) for m in moves] == [
        ("a", "w1", "w2", "rebalancing", 120)]
    assert moves[0].claimed_ms - moves[0].shed_ms == 150


def test_a_stream_that_comes_back_is_not_a_move() -> None:
    """Claimed again by the worker that shed it: no move."""
    lines = [line("shedding stream (rebalancing)", "w1", "a", 20_000),
             line("claimed", "w1", "a", 21_000)]
    assert moves_from_logs(lines) == []


def test_duplicates_across_a_move() -> None:
    """Seqs handled by both sides of a move are counted; a clean hand-on has none."""
    move = Move("a", "w1", "w2", "rebalancing", 100, 200, 100, 150)
    clean = [Handled("a", s, "w1", 50 + s) for s in range(5)] + [
        Handled("a", s, "w2", 250 + s) for s in range(5, 9)]
    assert duplicates_across(move, clean) == 0
    assert duplicates_across(move, [*clean, Handled("a", 4, "w2", 240)]) == 1


def test_balance_band() -> None:
    """Within ±max(1, 10 %) of the share is balanced; absent workers hold 0; unowned is not."""
    assert balance_of({"w1": 7, "w2": 5}, ["w1", "w2"]).balanced
    b = balance_of({"w1": 12}, ["w1", "w2"])
    assert not b.balanced and b.out_of_band == {"w1": 12, "w2": 0} and b.share == 6
    assert not balance_of({"w1": 6, "w2": 6}, ["w1", "w2"], unowned=1).balanced
    assert balance_of({"w1": 33, "w2": 27}, ["w1", "w2"]).balanced  # band 3 of 30
    assert not balance_of({}, []).balanced


def test_percentile_and_unowned_stats() -> None:
    """Nearest-rank quantiles; the claim's unowned_ms, else the claim minus the stamp."""
    assert percentile([], 0.5) is None and percentile([1.0, 2.0, 3.0], 0.99) == 3.0
    moves = [Move("a", "w1", "w2", "rebalancing", 0, 300, None, 100),
             Move("b", "w1", "w2", "rebalancing", 0, 100, 50, 60)]
    assert unowned_stats(moves) == {"p50": 0.125, "p99": 0.2, "max": 0.2}


def test_rebalancing_rows() -> None:
    """A moves row (count, unowned, duplicates) and a holdings row; out of balance fails."""
    seqs = check_seqs([Handled("a", s, "w", 0) for s in range(3)], {"a": 2})
    inc = Incident("rebalancing", 1.0, ["a"], expect_owner=False)
    inc.moves = [Move("a", "w1", "w2", "rebalancing", 0, 100, 80, 20, duplicates=0)]
    inc.balance = balance_of({"w1": 1, "w2": 1}, ["w1", "w2"])
    rows = summary_rows([inc], seqs)
    assert rows[0]["kind"] == "moves" and rows[0]["moves"] == 1
    assert rows[0]["max_unowned_s"] == 0.08 and rows[0]["duplicates"] == 0
    assert rows[1]["kind"] == "holdings" and rows[1]["balanced"] is True
    assert inc.unrecovered() == []
    console = Console(width=140, record=True)
    console.print(summary_table(rows))
    text = console.export_text()
    assert "rebalancing: 1 moves" in text and "balanced: yes" in text and "w1=1, w2=1" in text
    inc.balance = balance_of({"w1": 4}, ["w1", "w2"])
    assert inc.unrecovered() and "out of balance" in inc.unrecovered()[0]


def test_a_move_its_holder_never_finished_is_cut_short() -> None:
    """A shed whose holder never logged letting go (it hung mid-move) is not a completed move,
    even if that worker releases the stream in a later holding."""
    lines = [line("shedding stream (rebalancing)", "w1", "a", 20_000),
             line("claimed", "w2", "a", 25_000, unowned_ms=5_000),
             line("claimed", "w1", "a", 30_000, unowned_ms=0),
             line("released", "w1", "a", 40_000),
             line("shedding stream (rebalancing)", "w1", "b", 20_000),
             line("claimed", "w2", "b", 20_100, unowned_ms=0, moved_at_ms=1),
             line("handed over", "w1", "b", 20_130)]
    done = {m.conn_id: m.completed for m in moves_from_logs(lines)}
    assert done == {"a": False, "b": True}


def test_a_cut_short_move_stays_out_of_the_rebalancing_row() -> None:
    """The moves row counts completed moves only; one cut short is named in its note."""
    seqs = check_seqs([Handled(c, s, "w", 0) for c in "ab" for s in range(3)], {"a": 2, "b": 2})
    inc = Incident("rebalancing", 1.0, ["a", "b"], expect_owner=False)
    inc.moves = [Move("a", "w1", "w2", "rebalancing", 0, 5_500, 5_400, None, duplicates=3,
                      completed=False),
                 Move("b", "w1", "w2", "rebalancing", 0, 100, 0, 20, duplicates=0)]
    inc.note = "balanced"
    row = summary_rows([inc], seqs)[0]
    assert (row["moves"], row["max_unowned_s"], row["duplicates"]) == (1, 0.0, 0)
    assert row["cut_short"] == ["a"]
    assert cut_short_note(inc.moves) == ("1 more cut short by a failure (the holder never let "
                                         "go; failover claimed the stream): a")
    assert cut_short_note(inc.moves[1:]) == ""


def test_a_graceful_stop_counts_the_new_owners_logged_unowned_time() -> None:
    """After a SIGTERM, the first claim by another worker says how long the stream was
    unowned (0: a warm handoff), not the time since the signal; None if not logged."""
    claims = claims_from_logs([
        line("claimed", "w1", "a", 1_000, unowned_ms=0),
        line("claimed", "w2", "a", 9_000, unowned_ms=0),
        line("claimed", "w3", "a", 12_000, unowned_ms=700),
        line("claimed", "w2", "b", 9_500, unowned_ms=250),
        line("claimed", "w2", "c", 9_500)])
    t0 = claims[0].wall_ms - 1_000  # the lines' clock: ms after a minute began
    assert logged_unowned_s(claims, "a", not_by="w1", since_ms=t0 + 5_000) == 0.0
    assert logged_unowned_s(claims, "b", not_by="w1", since_ms=t0 + 5_000) == 0.25
    assert logged_unowned_s(claims, "c", not_by="w1", since_ms=t0 + 5_000) is None
    assert logged_unowned_s(claims, "a", not_by="w1", since_ms=t0 + 10_000) == 0.7
