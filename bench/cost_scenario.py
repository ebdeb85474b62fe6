"""Consumed capacity at production timings: each mode's own fleet, ``streams`` streams held by 2
workers for ``seconds``, everything the workers and the runner send to DynamoDB and SQS metered
(``bench.meter``), then priced for 500 and 10,000 connections (``bench.cost``).

Timings: ours (sessions) the production defaults (``FleetTiming.production``), sweep 1 s, SQS
long polls of 20 s; the seed's program (``bench.seed_worker``) lease 20 s, heartbeat 5 s,
reconcile 60 s. The upstream sends 1 message per second per stream, so every stream's seq
moves between two checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cost import FLEETS, consumed_monthly
from bench.harness import BenchFleet, now_ms
from bench.meter import window
from holdfast.core.rules import default_margin_ms
from holdfast.core.schema import STOPPED
from holdfast.core.table import set_desired_state
from holdfast.fleet.timing import FleetTiming

__all__ = ["PRODUCTION", "ProductionTiming", "production_cost"]


@dataclass(frozen=True, slots=True)
class ProductionTiming:
    lease_s: float
    heartbeat_s: float
    liveness: str  # "session" (ours) or "lease" (the seed's program: per-stream leases)
    checkpoint_s: float | None = None
    reconcile_s: float = 60.0
    skew_ms: int = 1000
    sweep_interval_ms: int = 1000

    def fleet_timing(self) -> FleetTiming:
        return FleetTiming(lease_s=self.lease_s, heartbeat_s=self.heartbeat_s,
                           skew_ms=self.skew_ms,
                           margin_ms=default_margin_ms(round(self.lease_s * 1000)),
                           sweep_interval_ms=self.sweep_interval_ms, rate=1.0)

    def worker_env(self) -> dict[str, str]:
        env = {"HOLDFAST_RECONCILE_SECONDS": f"{self.reconcile_s:g}",
               "HOLDFAST_POLL_SECONDS": "20", "HOLDFAST_POLL_DRAIN_SECONDS": "3",
               "HOLDFAST_NUDGE_VISIBILITY_SECONDS": "5"}
        if self.checkpoint_s is not None:
            env["HOLDFAST_CHECKPOINT_SECONDS"] = f"{self.checkpoint_s:g}"
        return env

    def settle_s(self) -> float:
        """Wait this long after the last claim, so every periodic write is in its cycle."""
        return max(self.checkpoint_s or 0.0, self.heartbeat_s) + 2 * self.heartbeat_s

    def as_dict(self) -> dict[str, Any]:
        return {"lease_s": self.lease_s, "heartbeat_s": self.heartbeat_s,
                "checkpoint_s": self.checkpoint_s, "liveness": self.liveness,
                "reconcile_s": self.reconcile_s, "sweep_interval_ms": self.sweep_interval_ms}


_OURS = FleetTiming.production()
PRODUCTION = {
    "ours": ProductionTiming(lease_s=_OURS.lease_s, heartbeat_s=_OURS.heartbeat_s,
                             liveness="session", checkpoint_s=_OURS.checkpoint_s,
                             skew_ms=_OURS.skew_ms),
    "baseline": ProductionTiming(lease_s=20.0, heartbeat_s=5.0, liveness="lease"),
}


def production_cost(run_dir: Path, mode: str, *, streams: int = 100, seconds: float = 120.0,
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """One mode's metered window at production timings, and its monthly bill."""
    t = PRODUCTION[mode]
    env = t.worker_env()  # overrides BenchFleet's 12 s baseline reconcile with the seed's 60 s
    runner_env = {"HOLDFAST_SWEEP_RENUDGE_MS": "5000"}
    bf = BenchFleet(run_dir, mode, t.fleet_timing(), worker_env=env, runner_env=runner_env,
                    name=f"{mode}-cost").start()
    out: dict[str, Any] = {"mode": mode, "timing": t.as_dict()}
    ids = [f"{mode}-prod-{i:03d}" for i in range(streams)]
    try:
        bf.worker(f"{mode}-cost-a")
        bf.worker(f"{mode}-cost-b")
        t_ins = now_ms()
        bf.create(ids)
        claimed = bf.wait(lambda: all(bf.handled.first_after(c, t_ins) for c in ids),
                          2 * t.reconcile_s + 60, poll_s=0.5)
        out["claim_all_s"] = round((now_ms() - t_ins) / 1000, 1)
        if not claimed:
            out["error"] = f"not every stream was claimed within {2 * t.reconcile_s + 60:g} s"
        say(f"[{mode} cost] {streams} streams claimed in {out['claim_all_s']} s; settling "
            f"{t.settle_s():g} s, then metering {seconds:g} s")
        time.sleep(t.settle_s())
        before = bf.meter()
        t0 = time.monotonic()
        time.sleep(seconds)
        out["metered"] = window(before, bf.meter(), streams=streams, workers=2,
                                seconds=time.monotonic() - t0, lease=bf.pf.table,
                                session=bf.session_table)
        for cid in ids:
            set_desired_state(bf.ddb, bf.pf.table, cid, STOPPED)
    finally:
        out["close"] = bf.close()
    out["monthly"] = [consumed_monthly(out["metered"], connections=c, workers=w, mode=mode)
                      for c, w in FLEETS]
    return out
