"""The throttling scenario at production defaults (``--throttle-only``): self-fences and calls.

One worker holding ``STREAMS`` streams behind the fault proxy (``holdfast.chaos``); quiet for
three spans as long as the throttle (the normal rate, their mean), then
``holdfast.chaos.throttle``'s plan (50 % of DynamoDB calls refused for 5 s, then 100 % for 2 s),
then a lease for any fence it causes. Repeated ``runs`` times, each on a fleet of its own. Per
run: fences logged by the worker (streams or the whole session), whether every stream kept its
owner and epoch, and the call rate during the throttle and in the span after it over the rate
before (``throttle_figures``). The targets (issue "Liveness"): 0 self-fences; the call rate
within twice normal.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from holdfast.chaos.throttle import ThrottlePlan, one_worker_run, tolerated
from holdfast.fleet.timing import FleetTiming

__all__ = ["STREAMS", "throttle_md", "throttle_production"]

STREAMS = 4  # a small worker: its heartbeat is most of its calls, the hardest case for the rate


def _one_run(run_dir: Path, timing: FleetTiming, plan: ThrottlePlan) -> dict[str, Any]:
    figures = one_worker_run(run_dir, timing, plan, STREAMS)
    fences = figures["fences"]
    return {"fences": len(fences) if isinstance(fences, list) else fences,
            "owners_kept": bool(figures["owners_kept"]) and bool(figures["held_all"]),
            "rate_ratio": figures["rate_ratio"], "after_ratio": figures["after_ratio"],
            "alive": figures["alive"]}


def throttle_production(run_dir: Path, *, runs: int = 5, checkpoint_s: float = 2.0,
                        say: Callable[[str], None] = print) -> dict[str, Any]:
    """``runs`` throttle scenarios at the production defaults, but for checkpoints every
    ``checkpoint_s`` (2 s by default, so the worker has other calls than its heartbeat to
    throttle; 20 s, the production default, for the fences alone)."""
    timing = FleetTiming.production(checkpoint_s=checkpoint_s)
    plan = ThrottlePlan()
    out: dict[str, Any] = {
        "streams": STREAMS, "plan": {"partial_s": plan.partial_s,
                                     "partial_fraction": plan.partial_fraction,
                                     "full_s": plan.full_s},
        "timing": {"lease_s": timing.lease_s, "heartbeat_s": timing.heartbeat_s,
                   "skew_ms": timing.skew_ms, "margin_ms": timing.margin_ms,
                   "checkpoint_s": checkpoint_s},
        "tolerated": tolerated(plan, timing.lease_timing()), "runs": []}
    for n in range(runs):
        folder = Path(tempfile.mkdtemp(prefix=f"throttle-{n}-", dir=run_dir))
        try:
            entry = _one_run(folder, timing, plan)
        except Exception as exc:  # report it, go on with the next run
            entry = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        say(f"[throttle, production] run {n + 1}/{runs}: {entry}")
        out["runs"].append(entry)
    return out


def throttle_md(t: dict[str, Any]) -> list[str]:
    """The report's section: fences and call rates per run."""
    runs = [r for r in t.get("runs", []) if "error" not in r]
    fences = sum(int(r["fences"]) for r in runs)
    ratios = [float(r["rate_ratio"]) for r in runs]
    after = [float(r["after_ratio"]) for r in runs]
    plan, timing = t.get("plan", {}), t.get("timing", {})
    out = ["## Throttled DynamoDB at production defaults", "",
           f"One worker holding {t.get('streams')} streams behind the fault proxy; DynamoDB "
           f"refuses {plan.get('partial_fraction', 0):.0%} of calls for "
           f"{plan.get('partial_s')} s, then all of them for {plan.get('full_s')} s "
           f"(`bench/throttle.py`). TTL {timing.get('lease_s')} s, heartbeat "
           f"{timing.get('heartbeat_s')} s, skew {timing.get('skew_ms')} ms, margin "
           f"{timing.get('margin_ms')} ms, checkpoints every {timing.get('checkpoint_s', 2.0)} "
           f"s; tolerated by the rules: {t.get('tolerated')}.", "",
           "| runs | self-fences | streams kept (owner, epoch) | call rate during / before "
           "(min-max) | after / before | target | verdict |", "|---|---|---|---|---|---|---|"]
    if runs:
        kept = sum(bool(r["owners_kept"]) for r in runs)
        met = fences == 0 and kept == len(runs)
        out.append(f"| {len(runs)} | {fences} | {kept} of {len(runs)} runs | "
                   f"{min(ratios):.2f}-{max(ratios):.2f} | {min(after):.2f}-{max(after):.2f} | "
                   f"0 self-fences; rate <= 2x | {'met' if met else 'NOT met'} (fences); "
                   f"rate {'met' if max(ratios) <= 2.0 else 'NOT met'} |")
    errors = [r["error"] for r in t.get("runs", []) if "error" in r]
    if errors:
        out.append(f"\nRuns that failed: {errors}")
    return [*out, ""]
