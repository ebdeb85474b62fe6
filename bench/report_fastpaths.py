"""Report sections for the fast paths (``bench.fastpaths``), as Markdown lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.report_production import _dist

__all__ = ["fast_paths_md"]

STOP_VARIANTS = {
    "ours": "ours: the order queue (router -> the holder's own SQS queue)",
    "ours_heartbeat_only": "ours without the order queue (the session's next heartbeat)",
    "seed": "seed (its next per-stream lease renewal)",
}
CRASH_VARIANTS = {
    "reported": "SIGKILL + platform report (`holdfast task-stopped`)",
    "ttl": "SIGKILL, silent (found by the session TTL)",
}


def _rows(part: dict[str, Any], variants: dict[str, str], judged: str, target: str,
          extra: Callable[[dict[str, Any]], list[Any]]) -> list[str]:
    """One table row per variant present; only ``judged`` has a target and a verdict."""
    rows = []
    for key, label in variants.items():
        e = part.get(key)
        if e is None:
            continue
        err = f" **Failed: {e['error']}**" if e.get("error") else ""
        cells = [f"{_dist(e.get('latency_s'))}{err}", *map(str, extra(e)),
                 target if key == judged else "(comparison)",
                 part.get("verdict", "-") if key == judged else "-"]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def fast_paths_md(fp: dict[str, Any]) -> list[str]:
    out: list[str] = []
    stop = fp.get("stop")
    if stop:
        out += [f"## Stop at production defaults (N = {stop.get('streams')})", "",
                "`desired_state = STOPPED` written -> the holder has closed the upstream "
                "connection, per stream, p50 / p99 / max in seconds (n). Two workers hold the "
                "streams; stops are written 0.1-0.5 s apart, at random phases of the heartbeat "
                "(ours 2 s, the seed 5 s).", "",
                "| path | STOPPED -> closed | missing | target | verdict |",
                "|---|---|---|---|---|"]
        out += _rows(stop, STOP_VARIANTS, "ours", f"p99 <= {stop.get('target_p99_s', 1):g} s",
                     lambda e: [e.get("missing")])
        out.append("")
    crash = fp.get("crash")
    if crash:
        out += [f"## Crash failover with the platform report (production defaults, N = "
                f"{crash.get('streams')})", "",
                "A worker holding every stream is SIGKILLed; with the report, what ECS would "
                "send (a task STOPPED) is handed to the same code right after the kill. Figure: "
                "kill -> first message handled by the survivor, per stream (p50 / p99 / max, "
                "s). In AWS, EventBridge's delivery of the ECS event comes on top of the "
                "reported figure; it cannot be measured here.", "",
                "| path | SIGKILL -> handled again | seq gap | duplicates | never resumed | "
                "target | verdict |", "|---|---|---|---|---|---|---|"]
        out += _rows(crash, CRASH_VARIANTS, "reported",
                     f"p99 <= {crash.get('target_p99_s', 2):g} s",
                     lambda e: [e.get("seq_gap"), e.get("duplicates"), e.get("missing")])
        calls = (crash.get("reported") or {}).get("report_call_s")
        if calls:
            out.append(f"\nThe report call itself (mark dead + release every stream) took "
                       f"{', '.join(f'{c:.2f}' for c in calls)} s per round.")
        out += ["", "Duplicates are the replay from the last checkpoint (every 20 s at "
                "production defaults), never a loss (the seq gap). The seed has no platform "
                "path: its SIGKILL failover at production defaults takes about 64 s "
                "(`bench --crash-production-only`).", ""]
    return out
