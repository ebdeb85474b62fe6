"""The fast paths at production defaults, each beside the path it shortcuts (issue 11).

- **Stop**: ``desired_state = STOPPED`` written -> the holder has closed the upstream
  connection (``scenarios.stop_latency``). Ours with the order queue; ours with orders riding
  the session item only (the next heartbeat); the seed (its next lease renewal, 5 s).
- **Crash with the platform report**: SIGKILL, then what ECS would report (``holdfast
  task-stopped``) -> every stream handled again by a survivor, measured from the kill, beside
  the same crash found by the session TTL (``bench.crash_production`` has the seed's).

Production timings as in ``bench.crash_production`` (``FleetTiming.production``), the sweeper
every 1 s. Locally the "platform" reports within a few
milliseconds of the kill; in AWS, EventBridge's own delivery of the ECS event comes on top and
cannot be measured here.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.crash_production import plan_for
from bench.harness import BenchFleet
from bench.scenarios import handover, stop_latency
from holdfast.core import names
from holdfast.fleet.procs import Proc

__all__ = ["REPORTED_TARGET_S", "STOP_TARGET_S", "crash_reported", "stop_production"]

STOP_TARGET_S = 1.0  # p99, the target for a stop at production defaults
REPORTED_TARGET_S = 2.0  # p99, SIGKILL + platform report -> handled again

Report = Callable[[BenchFleet, Proc], None]


def _fleet(run_dir: Path, variant: str, **worker_env: str) -> BenchFleet:
    mode = "baseline" if variant == "seed" else "ours"
    plan = plan_for(mode, 1)
    env = {**plan.worker_env, **worker_env}
    runner = dict(plan.runner_env)
    if names.ENV_ORDERS_QUEUE_PREFIX in worker_env:
        runner[names.ENV_ORDERS_QUEUE_PREFIX] = worker_env[names.ENV_ORDERS_QUEUE_PREFIX]
    return BenchFleet(run_dir, mode, plan.timing, worker_env=env, runner_env=runner,
                      name=f"fast-{variant}").start()


def stop_production(run_dir: Path, *, streams: int = 20,
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """Stop latency of each variant, two workers holding ``streams`` between them."""
    variants: dict[str, dict[str, str]] = {
        "ours": {},  # the order queue (the fleet's default prefix)
        "ours_heartbeat_only": {names.ENV_ORDERS_QUEUE_PREFIX: ""},
        "seed": {},
    }
    out: dict[str, Any] = {"streams": streams, "target_p99_s": STOP_TARGET_S}
    for variant, env in variants.items():
        say(f"[stop, production] {variant}: {streams} streams")
        bf = _fleet(run_dir, variant, **env)
        entry: dict[str, Any] = {"heartbeat_s": bf.timing.heartbeat_s}
        try:
            bf.worker(f"{variant}-stop-a")
            bf.worker(f"{variant}-stop-b")
            entry.update(stop_latency(bf, streams, 60))
        except Exception as exc:  # report what failed, keep the other variants
            entry["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            entry["close"] = bf.close()
        say(f"[stop, production] {variant}: {entry.get('latency_s')}")
        out[variant] = entry
    p99 = (out["ours"].get("latency_s") or {}).get("p99")
    out["verdict"] = ("not measured" if p99 is None else
                      "met" if p99 <= STOP_TARGET_S and not out["ours"].get("missing")
                      else "NOT met")
    return out


def crash_reported(run_dir: Path, report: Report, *, streams: int = 20, rounds: int = 3,
                   say: Callable[[str], None] = print) -> dict[str, Any]:
    """SIGKILL a holder of ``streams``, with and without the platform report (``report``)."""
    out: dict[str, Any] = {"streams": streams, "rounds": rounds,
                           "target_p99_s": REPORTED_TARGET_S}
    for variant, reporter in (("reported", report), ("ttl", None)):
        say(f"[crash, production] {variant}: {streams} streams, {rounds} round(s)")
        bf = _fleet(run_dir, f"crash-{variant}")
        gaps: list[float] = []

        def on_kill(proc: Proc, bf: BenchFleet = bf, reporter: Report | None = reporter,
                    gaps: list[float] = gaps) -> None:
            if reporter is not None:
                t0 = time.monotonic()
                reporter(bf, proc)
                gaps.append(round(time.monotonic() - t0, 3))

        entry: dict[str, Any] = {}
        try:
            entry.update(handover(bf, streams, signal.SIGKILL, rounds=rounds, timeout_s=60,
                                  tag=f"crash-{variant}", on_kill=on_kill))
        except Exception as exc:  # report what failed, keep the other variant
            entry["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            entry["close"] = bf.close()
        if gaps:
            entry["report_call_s"] = gaps
        lat = entry.get("latency_s", {})
        entry["missing"] = entry.get("expected_samples", 0) - lat.get("n", 0)
        say(f"[crash, production] {variant}: {lat}, gap {entry.get('seq_gap')}")
        out[variant] = entry
    p99 = (out["reported"].get("latency_s") or {}).get("p99")
    out["verdict"] = ("not measured" if p99 is None else
                      "met" if p99 <= REPORTED_TARGET_S and not out["reported"]["missing"]
                      else "NOT met")
    return out
