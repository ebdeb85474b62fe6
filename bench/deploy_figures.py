"""The deploy bench's figures from the files (pure, no I/O): the seed's claims, the window
``run_deploy`` measured, the report as compact JSON, and our workers' account of the handoffs.

The seed logs ``acquired`` (no worker id, ``ts_ms``) where our worker logs ``claimed``, so its
owner changes are read here (``seed_claims``) and recomputed over the deploy's window, which
``deploy_window`` reads from the lines ``run_deploy`` says as it opens and as each stop ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from bench.harness import dist
from bench.rebalance import LogEvent
from holdfast.fleet.deploy import DeployReport, Gap
from holdfast.fleet.moves import Claim, json_records

__all__ = ["STOP_LINE", "WINDOW_OPEN", "compact", "deploy_window", "handoff_figures",
           "seed_claims"]

# ``run_deploy``'s lines that mark its window: the action as the window opens, and each
# ``_stop``'s line once the old workers exited (the last one: just before the last stop).
WINDOW_OPEN = "==> deploy ("
STOP_LINE = ("deploy: ", " exit ")


def seed_claims(lines: Iterable[str], worker: str) -> list[Claim]:
    """The seed's ``acquired`` lines (JSON, ``ts_ms``, no worker id) in ``worker``'s log as
    claims, in time order."""
    out: list[Claim] = []
    for rec in json_records(lines, '"acquired"'):
        if (rec.get("message") == "acquired"
                and isinstance(rec.get("conn_id"), str) and isinstance(rec.get("ts_ms"), int)):
            out.append(Claim(rec["conn_id"], worker, rec["ts_ms"]))
    return sorted(out, key=lambda c: (c.wall_ms, c.conn_id))


def deploy_window(said: list[tuple[int, str]], window_s: float) -> tuple[int, int, int] | None:
    """(start, end, last stop) wall ms of ``run_deploy``'s window from the lines it said
    (wall ms, text) and its report's ``window_s``; None if the lines are not there."""
    start = next((ms for ms, text in said if text.startswith(WINDOW_OPEN)), None)
    if start is None:
        return None
    stops = [ms for ms, text in said if ms >= start and text.startswith(STOP_LINE[0])
             and STOP_LINE[1] in text]
    if not stops:
        return None
    return start, start + round(window_s * 1000), stops[-1]


def compact(report: DeployReport) -> dict[str, Any]:
    """The report as JSON, the per-stream move counts as a histogram (moves -> streams), at
    most 10 streams' lost seqs, and the figures in seconds to the millisecond."""
    out = report.to_json()
    per = out.pop("moves_by_stream")
    out["moves_histogram"] = {str(k): v for k, v in sorted(Counter(per.values()).items())}
    out["lost_by_stream"] = dict(sorted(out["lost_by_stream"].items())[:10])
    for key in ("moves_mean", "window_s", "gap_p50_s", "gap_p99_s", "gap_max_s", "added_p50_s",
                "added_p99_s", "added_max_s", "steady_p99_s", "steady_max_s"):
        if out.get(key) is not None:
            out[key] = round(out[key], 3)
    return out


def handoff_figures(events: Iterable[LogEvent], old: Iterable[str], start_ms: int,
                    end_ms: int, gaps: Iterable[Gap] = ()) -> dict[str, Any]:
    """Our workers' own lines on the handoffs: each old worker's stop (``stop_s``, releases
    and sessions lost in its life, from its "worker stopped" line), and the claims in the window:
    release -> claim (the claimer's ``unowned_ms``; a warm takeover has none), how each was
    found (``source``), how many started on a warm socket (make-before-break), and the delivery
    ``gaps`` of those moves apart from the others'."""
    olds = set(old)
    stops = {e.worker: e.fields for e in events if e.msg == "worker stopped"
             and e.worker in olds}
    claims = [e for e in events if e.msg == "claimed" and start_ms <= e.ms <= end_ms]
    warm = {(e.conn_id, e.worker) for e in claims if e.fields.get("warm")}
    split: dict[bool, list[float]] = {True: [], False: []}
    for g in gaps:
        split[(g.conn_id, g.dst) in warm].append(g.seconds)
    return {"stop_s": {w: f.get("stop_s") for w, f in sorted(stops.items())},
            "released": sum(int(f.get("released", 0)) for f in stops.values()),
            "sessions_lost": sum(int(f.get("sessions_lost", 0)) for f in stops.values()),
            "unowned_s": dist([e.fields["unowned_ms"] / 1000 for e in claims
                               if isinstance(e.fields.get("unowned_ms"), int)]),
            "claim_sources": dict(sorted(Counter(str(e.fields.get("source"))
                                                 for e in claims).items())),
            "warm": len(warm), "gap_warm_s": dist(split[True]),
            "gap_not_warm_s": dist(split[False])}
