"""Deploy bench: the seed's claims, the deploy's window, the compact figures and the report
section; no fleet."""

from __future__ import annotations

import json
from typing import Any

from bench.deploy_figures import compact, deploy_window, handoff_figures, seed_claims
from bench.rebalance import LogEvent
from bench.report import markdown
from bench.report_deploy import checks, deploy_md
from holdfast.fleet.deploy import Claim, Gap, deploy_report
from holdfast.fleet.recorder import Handled

TARGETS = {"make_before_break": 0.1, "one_connection": 0.5}


def _seed_line(msg: str, conn: str, ms: int) -> str:
    return json.dumps({"message": msg, "ts_ms": ms, "conn_id": conn})


def test_seed_claims_reads_acquired_lines_of_one_worker() -> None:
    """Only the seed's "acquired" lines count, each as a claim by the log's worker, in time
    order; other messages and broken lines are skipped."""
    lines = [_seed_line("acquired", "b", 2_000), "not json \"acquired\"",
             _seed_line("worker started", "a", 500), _seed_line("acquired", "a", 1_000),
             json.dumps({"message": "lease lost", "conn_id": "d", "ts_ms": 3, "was": "acquired"}),
             json.dumps({"message": "acquired", "conn_id": "c"})]
    assert seed_claims(lines, "w4") == [Claim("a", "w4", 1_000), Claim("b", "w4", 2_000)]


def test_deploy_window_from_the_scenario_lines() -> None:
    """The window opens at the deploy's action line, ends window_s later, and its last stop is
    the last "exit" line after the opening (not one before it)."""
    said = [(100, "deploy: w0 exit 0; earlier"), (1_000, "==> deploy (new-first): replacing"),
            (1_500, "deploy: w4, w5 (v2) started"), (9_000, "deploy: w1 exit 0; owned"),
            (20_000, "deploy: w2 exit 0; owned"), (25_000, "deploy done: 3 moves")]
    assert deploy_window(said, 30.25) == (1_000, 31_250, 20_000)
    assert deploy_window(said[:2], 1.0) is None  # an exit line before the opening only
    assert deploy_window(said[2:], 1.0) is None  # no opening line


def test_handoff_figures_of_the_old_workers_and_the_window() -> None:
    """Stops and releases of the old workers only; release -> claim, the sources of the
    claims and the warm takeovers inside the window only; the gaps of the moves onto a warm
    socket (stream and new holder) apart from the others."""
    ev = [LogEvent(100, "worker stopped", "w1", None, {"stop_s": 6.4, "released": 98,
                                                        "sessions_lost": 1}),
          LogEvent(100, "worker stopped", "w4", None, {"stop_s": 1.2, "released": 101}),
          LogEvent(50, "claimed", "w4", "a", {"unowned_ms": 9_000, "source": "nudge"}),
          LogEvent(1_000, "claimed", "w4", "a", {"unowned_ms": 200, "source": "handoff"}),
          LogEvent(1_100, "claimed", "w5", "b", {"unowned_ms": 400, "source": "handoff"}),
          LogEvent(1_150, "claimed", "w5", "d", {"source": "handoff", "warm": True}),
          LogEvent(1_200, "claimed", "w5", "c", {"source": "reconcile"})]
    gaps = [Gap("d", "w1", "w5", 1_000, 1_150), Gap("a", "w1", "w4", 0, 1_000),
            Gap("d", "w1", "w4", 1_000, 1_500)]
    h = handoff_figures(ev, ["w1", "w2"], 500, 2_000, gaps)
    assert (h["gap_warm_s"]["n"], h["gap_warm_s"]["max"]) == (1, 0.15)
    assert (h["gap_not_warm_s"]["n"], h["gap_not_warm_s"]["max"]) == (2, 1.0)
    assert h["stop_s"] == {"w1": 6.4} and h["released"] == 98 and h["sessions_lost"] == 1
    assert h["unowned_s"]["n"] == 2 and h["unowned_s"]["max"] == 0.4
    assert h["claim_sources"] == {"handoff": 3, "reconcile": 1} and h["warm"] == 1


def _report(moves: dict[str, list[str]]) -> Any:
    """A deploy report where each stream's claimers are listed in order (the first before the
    window), each claimer delivering one seq 1 s after the previous."""
    claims, records = [], []
    for conn, owners in moves.items():
        for i, w in enumerate(owners):
            claims.append(Claim(conn, w, i * 10_000))
            records.append(Handled(conn, i, w, i * 10_000 + 1_000))
    return deploy_report(style="one-at-a-time", conn_ids=list(moves),
                         versions={"w1": "v1", "w2": "v1", "w3": "v2", "w4": "v2"},
                         old_version="v1", claims=claims, records=records, start_ms=5_000,
                         end_ms=60_000, last_stop_ms=50_000, unowned_at_end=[])


def test_compact_keeps_a_histogram_of_moves() -> None:
    """Per-stream move counts become moves -> streams, the mean is rounded; the other figures
    stay."""
    out = compact(_report({"a": ["w1", "w3"], "b": ["w1", "w2", "w4"], "c": ["w2", "w3"]}))
    assert out["moves_histogram"] == {"1": 2, "2": 1} and out["moves_mean"] == 1.333
    assert "moves_by_stream" not in out and out["moves"] == 4 and out["moves_onto_old"] == 1


def test_checks_meet_only_one_move_onto_new_workers() -> None:
    """One move each onto new workers with 1 s gaps: moves met, gaps not; a stream moved
    twice via an old worker fails both move targets; a duplicate, a lost seq or a stream
    unowned at the end fails the last."""
    good = dict(checks(compact(_report({"a": ["w1", "w3"], "b": ["w2", "w4"]})),
                       TARGETS)[i][::2] for i in range(5))
    assert good == {"each stream moves exactly once": True,
                    "always onto a new-version worker": True,
                    "delay a move added p99 <= 0.5 s, one connection at a time": False,
                    "delay a move added p99 <= 0.1 s, make-before-break": False,
                    "0 duplicates, 0 lost seqs, none unowned at the end": True}
    bad = checks(compact(_report({"a": ["w1", "w2", "w3"], "b": ["w2", "w4"]})), TARGETS)
    assert [ok for _, _, ok in bad[:2]] == [False, False]
    never = checks(compact(_report({"a": ["w1", "w3"], "b": ["w2"]})), TARGETS)
    assert never[0][2] is False
    e = compact(_report({"a": ["w1", "w3"]}))
    assert [checks({**e, **bad_one}, TARGETS)[-1][2] for bad_one in (
        {"duplicates": 1}, {"lost": 2}, {"unowned_at_end": ["a"]}, {})] == [
        False, False, False, True]


def test_checks_judge_the_gap_by_the_designs_connection() -> None:
    """With the design's connection given, one gap row against its own target: an added
    delay of 0.3 s meets one connection at a time (0.5 s) and fails make-before-break (0.1 s);
    an older report without the added delay is judged on its raw gap."""
    e = {**compact(_report({"a": ["w1", "w3"]})), "gap_p99_s": 0.4, "added_p99_s": 0.3}
    one = [r for r in checks(e, TARGETS, "one connection at a time") if "added" in r[0]]
    mbb = [r for r in checks(e, TARGETS, "make-before-break") if "added" in r[0]]
    assert [(r[1], r[2]) for r in one] == [("0.30 s (target 0.5 s)", True)]
    assert [(r[1], r[2]) for r in mbb] == [("0.30 s (target 0.1 s)", False)]
    assert one[0][0] == mbb[0][0]  # one row label for every design of a report
    old = {**e, "added_p99_s": None}
    assert [(r[1], r[2]) for r in checks(old, TARGETS, "one connection at a time")
            if "gap per move" in r[0]] == [("0.40 s (target 0.5 s)", True)]


def test_checks_of_a_failed_run_are_empty() -> None:
    """A run that failed has no figures to judge."""
    assert checks({"error": "boom"}, TARGETS) == []


def test_section_shows_both_designs_and_a_failed_run() -> None:
    """The section has a row per design and style (with the steady gaps where measured), the
    targets table, the load around each run, and says which failed; the whole report renders
    it."""
    e = compact(_report({"a": ["w1", "w3"], "b": ["w2", "w4"]}))
    t = {"lease_s": 4.0, "heartbeat_s": 1.0, "checkpoint_s": 20.0, "skew_ms": 250,
         "reconcile_s": 60.0, "shutdown_s": 8.0, "cooldown_s": 60.0, "balance_interval_ms": 2000}
    d = {"workers": 2, "streams_per_worker": 1, "settle_s": 5.0, "old_version": "v1",
         "new_version": "v2", "target_gap_p99_s": TARGETS,
         "ours": {"timing": t, "connection": "make-before-break", "one-at-a-time": e,
                  "new-first": {**e, "steady_p99_s": 0.8, "steady_max_s": 0.9, "handoff": {
             "stop_s": {"w1": 6.4}, "released": 1, "sessions_lost": 0,
             "unowned_s": {"n": 2, "p50": 0.2, "p99": 0.4, "max": 0.4},
             "claim_sources": {"handoff": 2}, "warm": 1,
             "gap_warm_s": {"n": 1, "p50": 0.15, "p99": 0.15, "max": 0.15}}}},
         "baseline": {"timing": {**t, "lease_s": 20.0}, "one-at-a-time": {
             "error": "boom", "load_average_start": [1.0, 2.0, 3.0]}}}
    md = "\n".join(deploy_md(d))
    assert "| Holdfast | new-first | 1.00 / 1 (0) | 0 (0) |" in md
    assert "| seed | one-at-a-time | failed: boom |" in md
    assert "| target | Holdfast, one-at-a-time | Holdfast, new-first |" in md
    assert "lease 20 s" in md and "session TTL 4 s" in md and "Moves: make-before-break." in md
    assert "| 10.00 s (target 0.1 s): **NOT met** |" in md and "(target 0.5 s)" not in md
    assert "- seed, one-at-a-time: boom; load average 1.00 / 2.00 / 3.00 at the start, -" in md
    assert "meanwhile, between two deliveries p99 / max 0.80 / 0.90 s |" in md
    assert md.count("streams not moving meanwhile") == 1
    assert "release -> claim (`unowned_ms`) 0.20 / 0.40 / 0.40 s (n=2)" in md
    assert "1 on a warm socket; gap taken over warm 0.15 / 0.15 / 0.15 s (n=1);" in md
    assert "## Deploy: 2 workers x 1 streams" in markdown({"deploy": d})
    assert deploy_md({}) == []
