"""Crash failover at production defaults, not scaled down: SIGKILL a worker holding N streams,
measure (``scenarios.handover``) when a survivor handles each stream again.

Ours: sessions at the production defaults (``FleetTiming.production``: session TTL 4 s,
heartbeat 1 s, checkpoint 20 s, skew 0.5 s, margin 0.4 s), the sweeper every 1 s with its
production re-nudge (5 s), the worker's reconcile at 60 s. The seed (``bench.seed_worker``):
per-stream lease heartbeats (one UpdateItem each), lease 20 s, heartbeat 5 s, skew 1 s, no
router and no sweeper: only the survivor's 60 s reconcile finds the orphans. The upstream rate
and the rest are ``FleetTiming``'s defaults.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import BenchFleet
from bench.scenarios import handover
from holdfast.fleet.timing import FleetTiming

__all__ = ["CRASH_TARGET_S", "CrashPlan", "crash_production", "detection", "plan_for",
           "verdict"]

CRASH_TARGET_S = 6.0  # the liveness issue: SIGKILL -> every stream handled again, max
RECONCILE_S = 60.0  # the worker's default HOLDFAST_RECONCILE_SECONDS
RECONCILE_JITTER = 0.25  # worker.backoff.jittered: the period +/- 25 %
# Production values of what FleetTiming shortens for the demo (see worker/config.py).
_PROD_WORKER_ENV = {"HOLDFAST_RECONCILE_SECONDS": f"{RECONCILE_S:g}",
                    "HOLDFAST_POLL_SECONDS": "20", "HOLDFAST_POLL_DRAIN_SECONDS": "3",
                    "HOLDFAST_NUDGE_VISIBILITY_SECONDS": "5",
                    "HOLDFAST_RECONNECT_BASE_SECONDS": "0.5",
                    "HOLDFAST_RECONNECT_CAP_SECONDS": "30"}


@dataclass(frozen=True)
class CrashPlan:
    mode: str  # "ours" or "baseline" (the seed)
    timing: FleetTiming
    rounds: int
    timeout_s: float
    worker_env: dict[str, str] = field(default_factory=dict)
    runner_env: dict[str, str] = field(default_factory=dict)


def plan_for(mode: str, rounds: int) -> CrashPlan:
    """The production plan of ``mode``; the seed's timeout covers its slowest reconcile."""
    if mode == "ours":
        return CrashPlan("ours", FleetTiming.production(), rounds, 60.0,
                         dict(_PROD_WORKER_ENV),
                         {"HOLDFAST_SWEEP_RENUDGE_MS": "5000"})
    # BenchFleet runs the seed's program for the baseline; the reconcile here replaces its
    # scaled 12 s by the seed's 60 s.
    return CrashPlan("baseline", FleetTiming.production(lease_s=20.0, heartbeat_s=5.0,
                                                             skew_ms=1000), rounds,
                     2 * RECONCILE_S * (1 + RECONCILE_JITTER) + 30, dict(_PROD_WORKER_ENV))


def detection(mode: str, timing: FleetTiming, reconcile_s: float = RECONCILE_S) -> dict[str, Any]:
    """When a SIGKILLed worker's streams can be claimed again, from the timings alone (s).

    Ours: the last session heartbeat was 0..heartbeat before the kill; the session is dead at
    that + TTL (the lease) + skew; the sweeper, which wakes at that moment (at most one
    interval late), releases and nudges; then the claim (SQS receive, conditional write,
    connect, first message). The seed: the last lease renewal 0..heartbeat before the kill, the
    lease claimable at that + lease + skew, found by the survivor's next reconcile
    (period +/- 25 %)."""
    lease, hb, skew = timing.lease_s, timing.heartbeat_s, timing.skew_ms / 1000
    if mode == "ours":
        sweep = timing.sweep_interval_ms / 1000
        return {"formula": "TTL + skew + sweep + claim", "ttl_s": lease, "skew_s": skew,
                "sweep_s": sweep, "heartbeat_s": hb, "earliest_s": lease - hb + skew,
                "latest_before_claim_s": lease + skew + sweep}
    slowest = reconcile_s * (1 + RECONCILE_JITTER)
    return {"formula": "lease + skew + reconcile + claim", "lease_s": lease, "skew_s": skew,
            "reconcile_s": reconcile_s, "heartbeat_s": hb, "earliest_s": lease - hb + skew,
            "latest_before_claim_s": lease + skew + slowest,
            "latest_unjittered_s": lease + skew + reconcile_s}


def verdict(max_s: float | None, missing: int, limit_s: float = CRASH_TARGET_S) -> str:
    """``met`` when every stream was handled again and the slowest within ``limit_s``."""
    if max_s is None:
        return "not measured"
    if missing:
        return f"NOT met ({missing} never resumed)"
    return "met" if max_s <= limit_s else "NOT met"


def _timing(plan: CrashPlan) -> dict[str, Any]:
    t = plan.timing
    return {"lease_s": t.lease_s, "heartbeat_s": t.heartbeat_s, "checkpoint_s": t.checkpoint_s,
            "skew_ms": t.skew_ms, "margin_ms": t.margin_ms,
            "sweep_interval_ms": t.sweep_interval_ms if plan.mode == "ours" else None,
            "reconcile_s": RECONCILE_S, "rate_per_stream": t.rate,
            "liveness": "session" if plan.mode == "ours" else "lease",
            "renew_mode": "batch" if plan.mode == "ours" else "single",
            "router_and_sweeper": plan.mode == "ours"}


def crash_production(run_dir: Path, *, streams: int = 20, rounds: int = 3, seed_rounds: int = 1,
                     modes: tuple[str, ...] = ("ours", "baseline"),
                     say: Callable[[str], None] = print) -> dict[str, Any]:
    """Each mode on a fleet of its own; per mode the handover figures, timings, detection
    arithmetic and (ours) the verdict against ``CRASH_TARGET_S``."""
    out: dict[str, Any] = {"streams": streams, "target_s": CRASH_TARGET_S}
    for mode in modes:
        plan = plan_for(mode, rounds if mode == "ours" else seed_rounds)
        say(f"[{mode} crash, production] {streams} streams, {plan.rounds} round(s)")
        entry: dict[str, Any] = {"timing": _timing(plan),
                                 "detection_s": detection(mode, plan.timing)}
        bf = BenchFleet(run_dir, mode, plan.timing, worker_env=plan.worker_env,
                        runner_env=plan.runner_env, name=f"{mode}-crash-prod").start()
        try:
            entry.update(handover(bf, streams, signal.SIGKILL, rounds=plan.rounds,
                                  timeout_s=plan.timeout_s, tag="crash-prod"))
        except Exception as exc:  # report what failed, keep the other mode's figures
            entry["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            entry["close"] = bf.close()
        lat = entry.get("latency_s", {})
        entry["missing"] = entry.get("expected_samples", 0) - lat.get("n", 0)
        if mode == "ours":
            entry["verdict"] = verdict(lat.get("max"), entry["missing"])
        say(f"[{mode} crash, production] {lat}, gap {entry.get('seq_gap')}, "
            f"dups {entry.get('duplicates')}{'; ' + entry['error'] if 'error' in entry else ''}")
        out[mode] = entry
    return out
