"""Rebalancing bench: the balanced check, move counting, log parsing and the report; no fleet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.harness import dist
from bench.rebalance import (
    LogEvent,
    balanced,
    claim_counts,
    held_by_worker,
    max_in_motion,
    min_moves,
    moved_twice,
    moves,
    parse_log,
    shares,
    straight_back,
    variant,
    worker_of,
)
from bench.report_rebalance import rebalance_md, rebalance_rows, write_rebalance

FOUR = ["a", "b", "c", "d"]


def _snap(counts: dict[str | None, int], epoch: int = 1) -> dict[str, tuple[str | None, int]]:
    out: dict[str, tuple[str | None, int]] = {}
    for w, n in counts.items():
        for _ in range(n):
            out[f"s{len(out):03d}"] = (w, epoch)
    return out


def test_worker_of_strips_the_incarnation() -> None:
    """The owner "<worker>#<incarnation>" belongs to the worker; no owner to none."""
    assert worker_of("rb-a#7f3e") == "rb-a"
    assert worker_of("plain") == "plain"
    assert worker_of(None) is None and worker_of("") is None


def test_shares_and_held() -> None:
    """Shares are the total over the workers; a worker holding nothing counts 0."""
    assert shares(100, FOUR) == {w: 25.0 for w in FOUR}
    assert shares(10, []) == {}
    assert held_by_worker(_snap({"a": 3, None: 2}), ["a", "b"]) == {"a": 3, "b": 0}


def test_balanced_band_is_max_of_one_and_ten_percent() -> None:
    """25 ± 2.5: 27/23 is balanced, 28/22 is not."""
    assert balanced(_snap({"a": 27, "b": 23, "c": 25, "d": 25}), FOUR)
    assert not balanced(_snap({"a": 28, "b": 22, "c": 25, "d": 25}), FOUR)
    assert balanced(_snap({"a": 4, "b": 3, "c": 3}), ["a", "b", "c"])  # band 1 at share 3.3
    assert not balanced(_snap({"a": 5, "b": 3, "c": 2}), ["a", "b", "c"])


def test_balanced_needs_every_stream_owned_by_a_counted_worker() -> None:
    """An unowned stream, or one held by a worker not counted, is not balanced."""
    assert not balanced(_snap({"a": 25, "b": 25, "c": 25, "d": 24, None: 1}), FOUR)
    assert not balanced(_snap({"a": 25, "b": 25, "c": 25, "d": 24, "e": 1}), FOUR)
    assert not balanced(_snap({"a": 50, "b": 50}), FOUR)


def test_min_moves_is_the_excess_above_the_share() -> None:
    """50/50 onto four workers: 50 must move; uneven holdings count only what is above."""
    assert min_moves({"a": 50, "b": 50}, FOUR) == 50
    assert min_moves({"a": 60, "b": 40}, FOUR) == 50
    assert min_moves({"a": 25, "b": 25, "c": 25, "d": 25}, FOUR) == 0
    assert min_moves({"a": 10}, ["a", "b", "c"]) == 7  # 10 - 3.33, rounded up


def test_moves_count_the_claim_lines_in_the_window() -> None:
    """Each "claimed" line of a watched stream inside the window is one move: a stream
    claimed twice counts twice; other streams, other lines and other times do not count."""
    def ev(ms: int, conn: str, msg: str = "claimed") -> LogEvent:
        return LogEvent(ms, msg, "w", conn)

    events = [ev(10, "x"), ev(20, "y"), ev(30, "y"), ev(40, "z", "released"),
              ev(50, "other"), ev(5, "x"), ev(99, "x")]
    counts = claim_counts(events, {"x", "y", "z"}, 10, 90)
    assert moves(counts) == 3
    assert moved_twice(counts) == ["y"]
    assert moves(claim_counts(events, {"x"}, 100, 200)) == 0


def test_parse_log_reads_powertools_lines_and_skips_the_rest() -> None:
    """JSON lines become events with wall ms; text lines and torn JSON are skipped."""
    line = json.dumps({"level": "INFO", "message": "claimed", "worker_id": "rb-c",
                       "timestamp": "2026-12-01 18:02:28,342+0000", "conn_id": "rb-001",
                       "unowned_ms": 120, "moved_at_ms": 1})
    ev = parse_log([line, "plain text", '{"message": "torn"', "{}"])
    assert len(ev) == 1
    assert (ev[0].msg, ev[0].worker, ev[0].conn_id, ev[0].fields["unowned_ms"]) == (
        "claimed", "rb-c", "rb-001", 120)
    assert ev[0].ms == 1796148148342


def test_straight_back_only_within_the_cool_down_and_same_worker() -> None:
    """Shed by a and claimed by a within the cool-down is flagged; later or elsewhere is not."""
    shed = "shedding stream (rebalancing)"
    ev = [LogEvent(1000, shed, "a", "x"), LogEvent(1500, "claimed", "c", "x"),
          LogEvent(5000, "claimed", "a", "x"),
          LogEvent(1000, shed, "a", "y"), LogEvent(20_000, "claimed", "a", "y"),
          LogEvent(1000, shed, "b", "z"), LogEvent(1200, "claimed", "c", "z")]
    assert straight_back(ev, 10_000) == ["x"]
    assert straight_back(ev, 1000) == []


def test_variants() -> None:
    """Production: cool-down 60 s, decisions every 2 s, 5 min quiet; scaled: 10 s, 1 s, 60 s."""
    p, s = variant(True), variant(False)
    assert (p.timing.cooldown_s, p.timing.balance_interval_ms, p.quiet_s) == (60.0, 2000, 300.0)
    assert (s.timing.cooldown_s, s.timing.balance_interval_ms, s.quiet_s) == (10.0, 1000, 60.0)
    assert p.worker_env["HOLDFAST_RECONCILE_SECONDS"] == "60"
    assert variant(False, quiet_s=5).quiet_s == 5


def _figures(**over: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"variant": "production", "streams": 100, "quiet_s": 300.0,
                         "cooldown_s": 60.0, "lease_s": 8.0, "heartbeat_s": 2.0,
                         "balance_interval_ms": 2000, "target_balanced_s": 30.0,
                         "target_unowned_p99_s": 1.0, "balanced_s": 7.5, "last_move_s": 9.0,
                         "moves": 50, "min_moves": 50, "moved_twice": [], "claims_logged": 50,
                         "sheds_logged": 50, "unowned_s": dist([0.1, 0.2, 0.3]),
                         "duplicates": 0, "seq_gap": 0, "quiet_moves": 0,
                         "quiet_sheds_logged": 0, "quiet_claims_logged": 0,
                         "straight_back": [], "stalled": []}
    e.update(over)
    return e


def test_rows_all_met() -> None:
    """Every figure within its target is "met"."""
    rows = rebalance_rows(_figures())
    assert [r[3] for r in rows] == ["met"] * 7
    assert rows[0][1] == "7.5 s (last move at 9.0 s)"
    assert rows[2][1] == "0.20 / 0.30 / 0.30 (n=3)"


def test_rows_not_met_honestly() -> None:
    """Slow, too many moves, a slow tail, a duplicate, a quiet move: each "NOT met"."""
    rows = rebalance_rows(_figures(balanced_s=31.0, moves=60, unowned_s=dist([0.1, 1.5]),
                                   duplicates=3, seq_gap=1, quiet_moves=1,
                                   straight_back=["rb-001"], stalled=["rb-002"]))
    assert [r[3] for r in rows] == ["**NOT met**"] * 8
    assert "rb-001" in rows[6][1] and "rb-002" in rows[7][1]
    assert rebalance_rows(_figures(moves=55, moved_twice=[]))[1][3] == "met"
    assert rebalance_rows(_figures(moves=50, moved_twice=["x"]))[1][3] == "**NOT met**"


def test_rows_never_balanced_and_not_measured() -> None:
    """A run that never balanced says so; a failed run before the scale-out is not measured."""
    assert rebalance_rows(_figures(balanced_s=None))[0][1:] == (
        "never (within the timeout)", "<= 30 s", "**NOT met**")
    rows = rebalance_rows({"error": "boom", "quiet_s": 300.0, "cooldown_s": 60.0})
    assert {r[3] for r in rows} == {"not measured"}


def test_markdown_and_files(tmp_path: Path) -> None:
    """The section has one table per variant and the command; both files are written."""
    rb = {"production": _figures(command="python -m bench --rebalance-only"),
          "scaled": _figures(variant="scaled", quiet_s=60.0, error="RuntimeError: x")}
    md = "\n".join(rebalance_md(rb))
    assert "## Rebalancing: scale-out from 2 to 4 workers (N = 100)" in md
    assert "### Production defaults" in md and "### Scaled timings" in md
    assert "**Failed: RuntimeError: x**" in md and "moves in the quiet 5 min" in md
    assert "Command: `python -m bench --rebalance-only`" in md
    paths = write_rebalance({"date": "d", "rebalance": rb, "load_average": {"s": [1, 2, 3]}},
                            tmp_path, "r")
    assert [p.name for p in paths] == ["r.json", "r.md"]
    assert json.loads(paths[0].read_text())["rebalance"]["production"]["command"]
    assert "Load average" in paths[1].read_text()


def test_max_in_motion_overlaps_the_unowned_intervals() -> None:
    """Two moves unowned at once, a third after them; claims without a move do not count."""
    def claim(ms: int, unowned: int, moved: int | None = 1) -> LogEvent:
        return LogEvent(ms, "claimed", "c", "x",
                        {"unowned_ms": unowned, "moved_at_ms": moved})

    assert max_in_motion([claim(1000, 500), claim(1200, 400), claim(3000, 100),
                          claim(1100, 900, None)]) == 2
    assert max_in_motion([]) == 0


def test_motion_row() -> None:
    """Above the motion bound is "NOT met"; without the figure there is no row."""
    assert rebalance_rows(_figures(max_unowned_at_once=39, motion_bound=10))[3][3] == (
        "**NOT met**")
    assert len(rebalance_rows(_figures())) == 7


def test_gap_rows_shown_when_measured() -> None:
    """A run with handled records shows the gap per move and the delay it added after the
    unowned row, judged by no target of their own; older figures have neither row."""
    rows = rebalance_rows(_figures(gap_per_move_s=dist([0.2, 0.4]),
                                   added_per_move_s=dist([0.1, 0.3])))
    assert [r[0].split(" (")[0] for r in rows[3:5]] == ["delivery gap per move",
                                                         "delay a move added"]
    assert [r[1] for r in rows[3:5]] == ["0.30 / 0.40 / 0.40 (n=2)", "0.20 / 0.30 / 0.30 (n=2)"]
    assert not any("gap per move" in r[0] for r in rebalance_rows(_figures()))
