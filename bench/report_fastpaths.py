"""Report sections for the fast paths (``bench.fastpaths``), as Markdown lines."""

from __future__ import annotations

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
        for key, label in STOP_VARIANTS.items():
            e = stop.get(key)
            if e is None:
                continue
            target = (f"p99 <= {stop.get('target_p99_s', 1):g} s" if key == "ours"
                      else "(comparison)")
            verdict = stop.get("verdict", "-") if key == "ours" else "-"
            err = f" **Failed: {e['error']}**" if e.get("error") else ""
            out.append(f"| {label} | {_dist(e.get('latency_s'))}{err} | {e.get('missing')} | "
                       f"{target} | {verdict} |")
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
        for key, label in CRASH_VARIANTS.items():
            e = crash.get(key)
            if e is None:
                continue
            target = (f"p99 <= {crash.get('target_p99_s', 2):g} s" if key == "reported"
                      else "(comparison)")
            verdict = crash.get("verdict", "-") if key == "reported" else "-"
            err = f" **Failed: {e['error']}**" if e.get("error") else ""
            out.append(f"| {label} | {_dist(e.get('latency_s'))}{err} | {e.get('seq_gap')} | "
                       f"{e.get('duplicates')} | {e.get('missing')} | {target} | {verdict} |")
        calls = (crash.get("reported") or {}).get("report_call_s")
        if calls:
            out.append(f"\nThe report call itself (mark dead + release every stream) took "
                       f"{', '.join(f'{c:.2f}' for c in calls)} s per round.")
        out += ["", "The seed has no platform path: its crash figure is in the production crash "
                "section above.", ""]
    return out
