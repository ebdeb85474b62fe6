"""The start-burst row's pure parts: router lines, deliveries, verdicts, the report section."""

from __future__ import annotations

import json

from bench.report import markdown
from bench.start_burst import BEHIND_KEY, COLD_KEY, bursts, first_logged, router_arrivals, verdicts


def _line(conn: str, stamp: str, event: str = "INSERT") -> str:
    rec = {"level": "INFO", "message": "router decision", "timestamp": stamp,
           "conn_id": conn, "event_name": event, "outcome": "nudge"}
    return json.dumps(rec)


def test_router_arrivals_first_insert_decision_per_stream() -> None:
    """Only INSERT decisions count, the first per stream, at the line's own millisecond."""
    lines = ["2026-12-02 09:00:00,000 INFO holdfast.runner: runner reading ...",
             _line("a", "2026-12-02 09:00:01,250+0000"),
             _line("a", "2026-12-02 09:00:02,000+0000"),
             _line("b", "2026-12-02 09:00:01,900+0000", event="MODIFY"),
             "not json { at all", _line("c", "garbage")]
    got = router_arrivals(lines)
    assert got == {"a": 1_796_202_001_250}


def test_first_logged_reads_worker_claims() -> None:
    """A worker's first ``claimed`` line per stream, whatever the JSON spacing."""
    lines = ['{"message": "claimed", "timestamp": "2026-12-02 09:00:01,005+0000", '
             '"conn_id": "a"}',
             '{"message":"claimed","timestamp":"2026-12-02 09:00:03,000+0000","conn_id":"a"}',
             '{"message":"connected","timestamp":"2026-12-02 09:00:01,000+0000","conn_id":"b"}']
    assert first_logged(lines, "claimed") == {"a": 1_796_202_001_005}


def test_bursts_cluster_close_arrivals() -> None:
    """Arrivals under 100 ms after the previous one are one delivery; gaps start a new one."""
    assert bursts([1000, 1050, 1120, 1600, 5200, 5201]) == [1000, 1600, 5200]
    assert bursts([]) == []


def test_verdicts_and_report_section() -> None:
    """The targets are p99 <= 0.5 s at 30 and <= 1 s at 300; the report shows every row."""
    d30 = {"n": 30, "p50": 0.2, "p99": 0.45, "max": 0.5}
    d300 = {"n": 300, "p50": 0.6, "p99": 1.4, "max": 1.6}
    sb = {"workers": 3, "30": {"latency_s": d30, "insert_to_router_s": d30,
                               "router_to_handled_s": d30, "bursts": 2, "max_gap_s": 0.1,
                               "missing": 0},
          "300": {"latency_s": d300, "bursts": 9, "max_gap_s": 0.3, "missing": 0},
          BEHIND_KEY: {"streams": 30, "behind_stops": 100, "latency_s": d30, "bursts": 1,
                       "max_gap_s": 0, "missing": 0}}
    assert [v for _, _, v in verdicts(sb)] == ["met", "NOT met"]
    assert [v for _, _, v in verdicts({})] == ["not measured"] * 2
    md = markdown({"start_burst": sb})
    assert "## Start latency, 30 / 300 inserted at once" in md
    assert "| 30 | 0.20 / 0.45 / 0.50 (n=30) |" in md
    assert "| 300 | 0.60 / 1.40 / 1.60 (n=300) | - | - | - | 9 (0.3 s) | 0 |" in md
    assert "| 30, right after 100 stops | 0.20 / 0.45 / 0.50 (n=30) |" in md
    assert "(bench timings)" in md  # a result from before the timings were recorded


def test_report_names_the_timings_measured_at() -> None:
    """A burst measured at production defaults says so, with its lease and checkpoint."""
    d = {"n": 30, "p50": 0.2, "p99": 0.45, "max": 0.5}
    sb = {"workers": 3, "timing": {"lease_s": 4.0, "heartbeat_s": 1.0, "checkpoint_s": 20.0},
          "30": {"latency_s": d, "bursts": 1, "max_gap_s": 0, "missing": 0}}
    md = markdown({"start_burst": sb})
    assert "(production defaults: lease 4 s, heartbeat 1 s, checkpoint 20 s)" in md


def test_report_shows_the_cold_burst_first_and_the_warm_up() -> None:
    """A result with a cold-emulator burst shows it as the first row and says how it warmed."""
    d = {"n": 30, "p50": 0.4, "p99": 0.9, "max": 0.9}
    sb = {"workers": 3, COLD_KEY: {"streams": 30, "latency_s": d, "bursts": 1, "max_gap_s": 0,
                                   "missing": 0},
          "warm_bursts": 2,
          "30": {"latency_s": {**d, "p99": 0.45}, "bursts": 1, "max_gap_s": 0, "missing": 0}}
    md = markdown({"start_burst": sb})
    rows = [ln for ln in md.splitlines() if ln.startswith("| 30")]
    assert rows[0].startswith("| 30, cold emulator | 0.40 / 0.90 / 0.90 (n=30) |")
    assert rows[1].startswith("| 30 | 0.40 / 0.45 / 0.90 (n=30) |")
    assert "then 2 more bursts of 30, not measured, and the other rows" in md
    assert next(v for _, _, v in verdicts(sb)) == "met"  # the verdict is on the warm burst
