"""Production-default parts of the bench: crash failover verdicts and arithmetic, the density CPU
split, checkpoint progress, and their report sections; no fleet."""

from __future__ import annotations

import json
from typing import Any

from bench.crash_production import CRASH_TARGET_S, detection, plan_for, verdict
from bench.density import checkpoint_progress
from bench.density_cpu import burst_excess, kept_up, summarize
from bench.density_cpu import verdict as cpu_verdict
from bench.report import markdown
from bench.report_production import per_round
from holdfast.fleet.timing import FleetTiming


def test_crash_verdict() -> None:
    """Met only with every stream resumed and the slowest within 6 s."""
    assert CRASH_TARGET_S == 6.0
    assert verdict(5.9, 0) == "met"
    assert verdict(6.5, 0) == "NOT met"
    assert verdict(3.0, 2) == "NOT met (2 never resumed)"
    assert verdict(None, 0) == "not measured"


def test_detection_arithmetic() -> None:
    """Ours: TTL + skew + sweep (3.25 to 5.25 s before the claim); the seed: 16 to 96 s."""
    ours = detection("ours", FleetTiming.production())
    assert (ours["earliest_s"], ours["latest_before_claim_s"]) == (3.25, 5.25)
    seed = detection("baseline", FleetTiming.production(lease_s=20.0, heartbeat_s=5.0,
                                                        skew_ms=1000))
    assert (seed["earliest_s"], seed["latest_unjittered_s"],
            seed["latest_before_claim_s"]) == (16.0, 81.0, 96.0)


def test_crash_plans() -> None:
    """Ours runs with the sweeper's production re-nudge; the seed's timeout covers 2 reconciles."""
    ours, seed = plan_for("ours", 3), plan_for("baseline", 1)
    assert ours.runner_env["HOLDFAST_SWEEP_RENUDGE_MS"] == "5000"
    assert ours.worker_env["HOLDFAST_RECONCILE_SECONDS"] == "60"
    assert seed.timeout_s >= 150 and seed.rounds == 1 and seed.timing.lease_s == 20.0


def test_burst_excess() -> None:
    """A steady 0.5 core with a 1-core burst a quarter of the time: 0.25 core above median."""
    rates = ([0.5] * 6 + [1.5] * 2) * 4
    series = [0.0]
    for r in rates:
        series.append(series[-1] + r * 0.5)
    assert burst_excess(series, 0.5) == 0.25
    assert burst_excess([0.0, 1.0], 0.5) is None


def _run(cpu: float, **extra: Any) -> dict[str, Any]:
    return {"streams": 2000, "held": 2000, "cpu_cores": cpu, **extra}


CP_OK = {"streams_read": 2000, "advanced": 2000, "mean_advance_per_s": 0.98,
         "expected_advance_per_s": 1.0, "slowest_cycle_ms": 4000}
RENEW = {"single": {"client_cpu_ms_per_renewal": 1.2},
         "batch": {"client_cpu_ms_per_renewal": 0.15}}


def test_summarize_scales_to_5000() -> None:
    """The A/B difference is scaled to 5,000 and the session heartbeat added once."""
    s = summarize(_run(0.33, checkpoints=CP_OK), _run(0.30), RENEW)
    assert s["checkpoint_cores_ab"] == 0.03
    assert s["session_heartbeat_cores"] == 0.0012  # one UpdateItem every 1 s
    assert s["cores_at_5000"] == round(0.03 * 2.5 + 0.0012, 4)
    assert s["checkpoint_cores_from_per_write"] == 0.015
    assert s["kept_up"] is True and s["verdict"] == "met"


def test_cpu_verdict_and_keeping_up() -> None:
    """Over 0.2 core fails; a cycle longer than the period or stuck streams is not keeping up."""
    assert cpu_verdict(0.25, True) == "NOT met"
    assert cpu_verdict(0.1, False) == "met, but checkpoints did not keep up"
    assert cpu_verdict(None, None) == "not measured"
    assert cpu_verdict(-0.06, True).startswith("inconclusive")
    assert kept_up({**CP_OK, "slowest_cycle_ms": 25_000}, 20.0) is False
    assert kept_up({**CP_OK, "advanced": 1500}, 20.0) is False
    assert kept_up(None, 20.0) is None
    cycles_only = {"streams_read": 0, "seconds": 60.1, "slow_cycles": 3,
                   "slowest_cycle_ms": 5400}
    assert kept_up(cycles_only, 20.0) is True
    assert kept_up({**cycles_only, "slow_cycles": 1}, 20.0) is None
    assert cpu_verdict(0.1, None) == "met (whether checkpoints kept up: not measured)"


def test_checkpoint_progress_reads_the_log() -> None:
    """Seq advance per stream and per second; slow cycles and session warnings from JSON logs."""
    slow = {"message": "slow heartbeat: renewals took longer", "took_ms": 3100}
    log = "\n".join([json.dumps(slow),
                     json.dumps({"message": "slow session heartbeat", "took_ms": 2500}),
                     json.dumps({"message": "session heartbeat failed; streams keep running"}),
                     "not json"]).encode()
    p = checkpoint_progress({"a": 10, "b": 5}, {"a": 30, "b": 5}, 20.0, log, 1.0)
    assert (p["advanced"], p["mean_advance_per_s"]) == (1, 0.5)
    assert (p["slow_cycles"], p["slowest_cycle_ms"]) == (1, 3100)
    assert (p["slow_session_heartbeats"], p["session_errors"]) == (1, 1)


def test_report_renders_production_sections() -> None:
    """Crash (ours beside the seed, verdict, arithmetic), density CPU and load average render."""
    lat = {"n": 60, "p50": 9.1, "p99": 10.2, "max": 10.4}
    t = {"lease_s": 8.0, "heartbeat_s": 2.0, "checkpoint_s": 20.0, "skew_ms": 1000,
         "sweep_interval_ms": 1000, "reconcile_s": 60.0, "rate_per_stream": 10.0,
         "liveness": "session", "renew_mode": "batch"}
    seed_t = {**t, "lease_s": 20.0, "heartbeat_s": 5.0, "liveness": "lease",
              "renew_mode": "single", "sweep_interval_ms": None}
    r = {"date": "2026-12-01", "prices_usd": {}, "load_average": {"start": [1.0, 0.9, 0.8]},
         "crash_production": {
             "streams": 20, "target_s": 6.0,
             "ours": {"timing": t, "rounds": 3, "latency_s": lat, "seq_gap": 0,
                      "duplicates": 40, "missing": 0, "verdict": "met",
                      "detection_s": detection("ours", FleetTiming.production())},
             "baseline": {"timing": seed_t, "rounds": 1, "seq_gap": 0, "duplicates": 0,
                          "latency_s": {"n": 20, "p50": 50.0, "p99": 51.0, "max": 51.0},
                          "missing": 0, "detection_s": detection(
                              "baseline", FleetTiming.production(lease_s=20, heartbeat_s=5,
                                                                 skew_ms=1000))}},
         "density_cpu": [{**summarize(_run(0.33, checkpoints=CP_OK), _run(0.30), RENEW),
                          "runs": {"on": {"checkpoints": CP_OK}}},
                         {"streams": 5000, "error": "on: RuntimeError: x"}]}
    text = markdown(r)
    assert "| ours (sessions + sweeper) | 9.10 / 10.20 / 10.40 (n=60) | 0 | 40 | 0 | " \
           "max <= 6 s | met |" in text
    assert "| seed (per-stream leases, reconcile) | 50.00 / 51.00 / 51.00 (n=20) |" in text
    assert "TTL 4 + skew 0.25 + sweep <= 1 + claim: claimable 3.25 to 5.25 s" in text
    assert "| 2000 | 0.330 | 0.300 | 0.030 |" in text and "| <= 0.2 | met |" in text
    assert "| 5000 | failed: on: RuntimeError: x |" in text
    assert "kept up: True" in text and "start: 1.00 / 0.90 / 0.80" in text


def test_per_round_needs_every_sample() -> None:
    """Rounds are split from the samples only when every stream of every round resumed."""
    e = {"samples": [7.0, 8.0, 9.0, 11.0], "expected_samples": 4}
    assert per_round(e, 2) == [(7.0, 8.0), (9.0, 11.0)]
    assert per_round({**e, "expected_samples": 6}, 2) == []
