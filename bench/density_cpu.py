"""CPU spent on liveness and checkpoints by one worker holding N streams, at production defaults
(sessions, ``holdfast.core.settings``' heartbeat, lease and checkpoint), measured rather than
estimated.

The same N and upstream rate (1 message per second per stream) run twice, each its own fleet
and worker: checkpoints every 20 s, and every 1,200 s (nothing written in the window). The
difference of the worker's CPU (from /proc, the worker process only) is what the checkpoints
cost. Two cross-checks: within the 20 s run, the CPU above the run's median while the
checkpoint bursts run (every stream's checkpoint goes out in one batched cycle every 20 s);
and the client CPU per batched write measured by ``bench/renew_cost.py`` times the write rate.
The session heartbeat (one UpdateItem per worker every 2 s) is in both runs, so it is added
from the measured client CPU of a single UpdateItem times its rate.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.density import run_density
from holdfast.core import settings

__all__ = ["CPU_TARGET_CORES", "TARGET_STREAMS", "burst_excess", "density_cpu", "summarize",
           "verdict"]

CPU_TARGET_CORES = 0.2  # the sessions issue: liveness + checkpoints at 5,000 connections
TARGET_STREAMS = 5000
# The production defaults (holdfast.core.settings); checkpoints off: the longest period allowed
# (1,200 s), far longer than the measured window.
HEARTBEAT_S, LEASE_S, CHECKPOINT_S, OFF_S = (settings.HEARTBEAT_SECONDS.read({}),
                                              settings.LEASE_SECONDS.read({}),
                                              settings.CHECKPOINT_SECONDS.read({}),
                                              float(settings.CHECKPOINT_SECONDS.hi))


def burst_excess(series: list[float], sample_s: float) -> float | None:
    """Mean CPU cores above the median sample over a CPU-seconds time series: what periodic
    bursts (shorter than half the time) add to a steady load."""
    rates = [(b - a) / sample_s for a, b in itertools.pairwise(series)]
    if len(rates) < 4:
        return None
    return round(statistics.fmean(rates) - statistics.median(rates), 4)


def _ms(renew: dict[str, Any] | None, mode: str) -> float | None:
    v = (renew or {}).get(mode, {}).get("client_cpu_ms_per_renewal")
    return float(v) if v is not None else None


def kept_up(cp: dict[str, Any] | None, checkpoint_s: float) -> bool | None:
    """Did every stream's checkpoint move, at about the message rate, with no cycle longer
    than the checkpoint period? Without the stored checkpoints (none read), from the cycle
    times alone when every cycle of the window was slow enough to be logged; else None."""
    if not cp:
        return None
    slow = cp.get("slowest_cycle_ms") or 0
    if not cp.get("streams_read"):
        cycles = int(cp.get("seconds", 0) // checkpoint_s)
        if cycles and cp.get("slow_cycles", 0) >= cycles:
            return bool(slow < checkpoint_s * 1000)
        return None
    rate = cp.get("mean_advance_per_s") or 0.0
    return bool(cp["advanced"] == cp["streams_read"] and slow < checkpoint_s * 1000
                and rate >= 0.8 * cp["expected_advance_per_s"])


def verdict(cores_at_target: float | None, keeps_up: bool | None,
            limit: float = CPU_TARGET_CORES) -> str:
    """``met`` when the liveness + checkpoint CPU at 5,000 is within ``limit`` and the
    checkpoints kept up (else the figure may be low because writes were missing)."""
    if cores_at_target is None:
        return "not measured"
    if cores_at_target < 0:
        return "inconclusive (A/B below zero: run-to-run noise exceeds the checkpoint CPU)"
    if cores_at_target > limit:
        return "NOT met"
    if keeps_up is None:
        return "met (whether checkpoints kept up: not measured)"
    return "met" if keeps_up else "met, but checkpoints did not keep up"


def summarize(on: dict[str, Any], off: dict[str, Any], renew: dict[str, Any] | None,
              *, checkpoint_s: float = CHECKPOINT_S,
              heartbeat_s: float = HEARTBEAT_S) -> dict[str, Any]:
    """The CPU split from the two runs (``on``: checkpoints every ``checkpoint_s``; ``off``:
    none) and the per-write client CPU; figures in cores, and scaled to 5,000 streams."""
    held = on.get("held", on["streams"])
    out: dict[str, Any] = {"streams": on["streams"], "held": held,
                           "checkpoint_s": checkpoint_s, "heartbeat_s": heartbeat_s,
                           "cpu_cores_checkpoint_20s": on.get("cpu_cores"),
                           "cpu_cores_checkpoint_off": off.get("cpu_cores")}
    diff = None
    if on.get("cpu_cores") is not None and off.get("cpu_cores") is not None:
        diff = round(on["cpu_cores"] - off["cpu_cores"], 4)
    out["checkpoint_cores_ab"] = diff
    out["checkpoint_cores_burst"] = (burst_excess(on["cpu_series_s"], on["sample_s"])
                                     if on.get("cpu_series_s") else None)
    single, batch = _ms(renew, "single"), _ms(renew, "batch")
    session = round(single / 1000 / heartbeat_s, 5) if single is not None else None
    out["session_heartbeat_cores"] = session
    out["write_rate_per_s"] = round(held / checkpoint_s, 1)
    out["checkpoint_cores_from_per_write"] = (round(batch / 1000 * held / checkpoint_s, 4)
                                              if batch is not None else None)
    out["client_cpu_ms_per_write"] = {"batch": batch, "single": single}
    total = None if diff is None else round(diff + (session or 0.0), 4)
    out["liveness_checkpoint_cores"] = total
    scale = TARGET_STREAMS / max(held, 1)
    out["scale_to_target"] = round(scale, 3)
    at_target = None if diff is None else round(diff * scale + (session or 0.0), 4)
    out["cores_at_5000"] = at_target
    out["kept_up"] = kept_up(on.get("checkpoints"), checkpoint_s)
    out["target_cores"] = CPU_TARGET_CORES
    out["verdict"] = verdict(at_target, out["kept_up"])
    return out


def density_cpu(n: int, *, work: Path, renew: dict[str, Any] | None, measure_s: float = 60.0,
                settle_s: float = 25.0, say: Callable[[str], None] = print) -> dict[str, Any]:
    """The two runs at ``n`` streams and their summary (each run's own figures kept: RSS per
    connection, claim time, checkpoint progress)."""
    runs: dict[str, dict[str, Any]] = {}
    for label, cp in (("on", CHECKPOINT_S), ("off", OFF_S)):
        say(f"density CPU {n}: checkpoint every {cp:g} s")
        try:
            runs[label] = run_density(n, heartbeat_s=HEARTBEAT_S, lease_s=LEASE_S,
                                      checkpoint_s=cp, measure_s=measure_s, settle_s=settle_s,
                                      sample_s=0.5, track_checkpoints=True,
                                      work=work / f"density-cpu-{n}-{label}")
        except Exception as exc:  # report what failed
            return {"streams": n, "error": f"{label}: {type(exc).__name__}: {exc}", **runs}
        say(f"density CPU {n} ({label}): {runs[label]['cpu_cores']} cores, "
            f"{runs[label].get('checkpoints')}")
    summary = summarize(runs["on"], runs["off"], renew)
    for r in runs.values():
        r.pop("cpu_series_s", None)  # long; the summary has what it said
    return {**summary, "runs": runs}
