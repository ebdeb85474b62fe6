"""A scale-in (``--scale-in-only``): 3 workers x 100 streams of one version, balanced, then one
worker SIGTERMed with no replacement, as ECS's scale-in does; ours beside the seed's program.

What a move costs a stream when no deploy names successors in advance: a balanced fleet has no
live target, so the stopping worker asks the decider for successors (``worker.successors``)
and hands its streams over warm; the seed releases (expiry 0, the owner kept) and the other
workers' next reconcile (every 60 s) takes them. Per move, from the old holder's last delivery
to the new one's first: the gap, and the delay it added to the stream's own spacing (the
demo upstream's 0.1 s); streams not moving, their largest spacing meanwhile; duplicates and
lost seqs across the window; the stopping worker's warm handoffs and releases, and its stop.

Set-up as the deploy's (``bench.deploy``): production defaults, the stack's 25 s stop budget,
the old workers placed by ``bench.deploy._place`` and settled by the deploy scenario's rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.crash_production import RECONCILE_JITTER, RECONCILE_S
from bench.deploy import (
    PER_WORKER,
    SHUTDOWN_S,
    WORKERS,
    BenchSession,
    _place,
    bench_run,
)
from bench.harness import dist, now_ms
from holdfast.fleet.deploy import (
    added_delays,
    delivery_gaps,
    duplicate_deliveries,
    lost_seqs,
    steady_gaps,
)
from holdfast.fleet.deploy_scenario import _delivered_by_owner, _live, _settled, _stop
from holdfast.fleet.recorder import read_records

__all__ = ["scale_in_bench", "scale_in_md"]

TARGET_ADDED_P99_S = 0.1  # issue 21's make-before-break target, for any planned move


def _one(run_dir: Path, mode: str, say: Callable[[str], None]) -> dict[str, Any]:
    """One scale-in on a fleet of its own: the figures, or the error."""
    ids = [f"sin-{i:03d}" for i in range(WORKERS * PER_WORKER)]
    with bench_run(run_dir, "scale-in", mode, say) as run:
        s, out, seed = run.s, run.out, run.seed
        _place(s, run.bf, ids, run.start)
        _settled(s, ids)
        victim = _live(s)[0]
        out["held"] = sum(1 for c in ids if s.observer.worker_of(c) == victim)
        start_ms = now_ms()
        out["owned_again"] = _stop(s, [victim], ids)
        if seed:  # its streams wait for the others' next reconcile
            s.wait_until(lambda: s.all_owned(ids), RECONCILE_S * (1 + RECONCILE_JITTER) + 5)
        s.wait_until(lambda: _delivered_by_owner(s, ids), 10)
        out.update(_figures(s, victim, start_ms, now_ms(), seed=seed))
        say(f"{run.view.tag} {out['moves']} moves of {out['held']}, gap p50/p99 "
            f"{out['gap_s'].get('p50')} / {out['gap_s'].get('p99')} s, {out['handed_over']} "
            f"warm, dups {out['duplicates']}, lost {out['lost']}")
    return run.out


def _figures(s: BenchSession, victim: str, start_ms: int, end_ms: int, *,
             seed: bool) -> dict[str, Any]:
    """The scale-in's figures from the run's records and the stopped worker's log."""
    records = list(read_records(s.fleet.record_dir))
    gaps = delivery_gaps(records, start_ms, end_ms)
    log = s.fleet.workers[victim].log_path.read_text(errors="replace").splitlines()
    # Its stop's lines: the sheds that balanced the fleet before it are not the scale-in's.
    log = log[next((i for i, line in enumerate(log) if '"signal received' in line), 0):]
    stopped = [json.loads(line) for line in log if '"worker stopped"' in line]
    return {"moves": len(gaps), "gap_s": dist([g.seconds for g in gaps]),
            "added_s": dist(added_delays(records, start_ms, end_ms)),
            "not_moving_s": dist(steady_gaps(records, start_ms, end_ms)),
            "duplicates": duplicate_deliveries(records, start_ms, end_ms),
            "lost": sum(len(v) for v in lost_seqs(records, start_ms, end_ms).values()),
            # Our worker's lines (the seed's program logs neither).
            "handed_over": None if seed else sum('"handed over"' in line for line in log),
            "released": None if seed else sum('"message":"released"' in line for line in log),
            "stop_s": stopped[0].get("stop_s") if stopped else None}


def scale_in_bench(run_dir: Path, *, modes: Iterable[str] = ("ours", "baseline"),
                   say: Callable[[str], None] = print) -> dict[str, Any]:
    """A scale-in for each design; the report section's figures."""
    out: dict[str, Any] = {"workers": WORKERS, "streams_per_worker": PER_WORKER,
                           "shutdown_s": SHUTDOWN_S, "target_added_p99_s": TARGET_ADDED_P99_S}
    for mode in modes:
        say(f"[scale-in] {mode}: {WORKERS} workers x {PER_WORKER} streams, one SIGTERMed")
        out[mode] = _one(run_dir, mode, say)
    return out


def scale_in_md(r: dict[str, Any]) -> list[str]:
    """The report's section: one row per design."""
    from bench.report_production import _dist

    out = ["## Scale-in: one of three workers SIGTERMed, no replacement", "",
           f"{r.get('workers')} workers x {r.get('streams_per_worker')} streams of one version, "
           f"balanced, production defaults, stop budget {r.get('shutdown_s')} s "
           "(`bench/scale_in.py`). Seconds per move p50 / p99 / max; added = beyond the "
           "stream's own spacing; not moving = streams that stayed, their spacing meanwhile.",
           "", "| design | moves / held | gap per move | added | not moving | warm / released "
           "| stop | duplicates / lost |", "|---|---|---|---|---|---|---|---|"]
    for key, label in (("ours", "ours: successors asked of the decider, make-before-break"),
                       ("baseline", "seed: released, taken at the next reconcile")):
        e = r.get(key)
        if not e:
            continue
        if e.get("error"):
            out.append(f"| {label} **Failed: {e['error']}** | | | | | | | |")
            continue
        warm = ("-" if e.get("handed_over") is None
                else f"{e.get('handed_over')} / {e.get('released')}")
        stop = "-" if e.get("stop_s") is None else f"{e['stop_s']:.1f} s"
        out.append(f"| {label} | {e.get('moves')} / {e.get('held')} | {_dist(e.get('gap_s'))} "
                   f"| {_dist(e.get('added_s'))} | {_dist(e.get('not_moving_s'))} | {warm} | "
                   f"{stop} | {e.get('duplicates')} / {e.get('lost')} |")
    out += ["", f"Target (ours, as for a deploy's planned moves): added p99 <= "
            f"{r.get('target_added_p99_s')} s.", ""]
    return out
