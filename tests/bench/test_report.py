"""Bench smoke tests: percentiles, the recorder tail, the cost model and the report, no fleet."""

from __future__ import annotations

import json
from pathlib import Path

from bench.cost import monthly_cost
from bench.harness import HandledLog, dist
from bench.report import markdown, write_report


def test_dist_nearest_rank() -> None:
    """p50 is the median, p99 the nearest-rank 99th percentile, max the largest."""
    d = dist([float(i) for i in range(1, 101)])
    assert d == {"n": 100, "p50": 50.5, "p99": 99.0, "max": 100.0}
    assert dist([])["n"] == 0


def test_handled_log_reads_incrementally(tmp_path: Path) -> None:
    """Only whole lines are read; a torn last line is picked up on the next poll."""
    f = tmp_path / "w1.seqs"
    f.write_text("c1 5 w1 1000\nc1 6 w1 10")
    log = HandledLog(tmp_path)
    log.poll()
    assert log.first_after("c1", 0) == (1000, 5)
    with f.open("a") as out:
        out.write("10\nc1 7 w2 1020\n")
    log.poll()
    assert log.seqs("c1") == [5, 6, 7]
    assert log.first_after("c1", 1005, not_worker="w1") == (1020, 7)
    assert log.last_of("c1", "w1") == (1010, 6)


STEADY = {"streams": 50, "seconds": 60, "heartbeat_s": 1.0, "worker_dynamodb": {
    "BatchExecuteStatement": {"calls_per_conn_hour": 144.0, "items_per_conn_hour": 3600.0}}}


def test_cost_scales_heartbeat_and_prices() -> None:
    """1 s-heartbeat counts scale to 720 writes/conn-hour at 5 s; 500 conns cost ~$164/month."""
    c = monthly_cost(STEADY, bench_heartbeat_s=1.0, mode="ours")
    assert c["lease_writes_per_conn_hour"] == 720.0
    assert c["write_round_trips_per_conn_hour"] == 28.8
    assert 160 < c["monthly_usd"]["dynamodb_writes"] < 170
    assert c["monthly_usd"]["lambda"] > 0
    assert monthly_cost(STEADY, bench_heartbeat_s=1.0, mode="baseline")["monthly_usd"][
        "lambda"] == 0


def test_report_files_and_targets(tmp_path: Path) -> None:
    """The report writes JSON, Markdown and a plot, and judges each target it has a figure for."""
    lat = {"n": 3, "p50": 0.2, "p99": 0.3, "max": 0.3}
    r = {"date": "2026-01-01", "quick": True, "prices_usd": {},
         "ours": {"timing": {"lease_s": 4.0}, "start": {"latency_s": lat, "samples": [.1, .2]},
                  "crash_n10": {"latency_s": {**lat, "max": 6.0}, "samples": [5.0, 6.0],
                                "seq_gap": 0, "duplicates": 3},
                  "steady": STEADY, "cost": monthly_cost(STEADY, bench_heartbeat_s=1.0,
                                                         mode="ours")},
         "baseline": {"start": {"latency_s": lat, "samples": [5.0, 9.0]}},
         "density": [{"streams": 1000, "heartbeat_s": 5, "rss_per_connection_kb": 30.0,
                      "cpu_cores": 0.1, "cpu_cores_per_1000": 0.1, "claim_all_s": 9}]}
    text = markdown(r)
    assert "| start p99 <= 1 s | 0.3 | met |" in text
    assert "crash failover max <= lease + 1 s (5 s) | 6.0 | NOT met" in text
    assert "<= 64 KB RSS per connection (1000 connections) | 30.0 KB | met" in text
    paths = write_report(r, tmp_path, "x")
    assert [p.name for p in paths] == ["x.json", "x.md", "x-latency.png", "x-density-cost.png"]
    assert json.loads(paths[0].read_text())["quick"] is True
