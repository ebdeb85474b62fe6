"""The report's start-latency burst section (``bench.start_burst``), as Markdown lines."""

from __future__ import annotations

from typing import Any

from bench.start_burst import BEHIND_KEY, BURST_SIZES, COLD_KEY, verdicts

__all__ = ["start_burst_md"]


def _dist(d: dict[str, Any] | None) -> str:
    if not d or not d.get("n"):
        return "-"
    return f"{d['p50']:.2f} / {d['p99']:.2f} / {d['max']:.2f} (n={d['n']})"


def start_burst_md(sb: dict[str, Any]) -> list[str]:
    sizes = [str(n) for n in BURST_SIZES if str(n) in sb]
    if not sizes:
        return []
    t = sb.get("timing")
    timing = ("bench timings" if not t else f"production defaults: lease {t['lease_s']:g} s, "
              f"heartbeat {t['heartbeat_s']:g} s, checkpoint {t['checkpoint_s']:g} s")
    out = [f"## Start latency, {' / '.join(sizes)} inserted at once", "",
           f"{sb.get('workers', 3)} workers on the local fleet ({timing}); the items are "
           "written at once from a thread pool. Insert -> first message handled, split at the "
           "router's decision line and the first worker's claim line; deliveries are the "
           "distinct moments the router received the inserts. p50 / p99 / max in seconds.", "",
           "| inserted at once | insert -> first message | insert -> routed | "
           "routed -> claimed | claimed -> handled | deliveries (max gap) | missing |",
           "|---|---|---|---|---|---|---|"]
    rows = [(n, n) for n in sizes]
    if COLD_KEY in sb:
        out[2] += (" The first row is the fresh fleet's first burst, on a cold DynamoDB Local "
                   "(a JVM whose JIT has not compiled its write path yet); then "
                   f"{sb.get('warm_bursts')} more bursts of {sb[COLD_KEY].get('streams')}, not "
                   "measured, and the other rows.")
        rows.insert(0, (COLD_KEY, f"{sb[COLD_KEY].get('streams')}, cold emulator"))
    if BEHIND_KEY in sb:
        b = sb[BEHIND_KEY]
        rows.append((BEHIND_KEY, f"{b.get('streams')}, right after {b.get('behind_stops')} stops"))
    for key, label in rows:
        r = sb[key]
        out.append(f"| {label} | {_dist(r.get('latency_s'))} | {_dist(r.get('insert_to_router_s'))}"
                   f" | {_dist(r.get('router_to_claimed_s'))} "
                   f"| {_dist(r.get('claimed_to_handled_s'))} | {r.get('bursts')} "
                   f"({r.get('max_gap_s')} s) | {r.get('missing')} |")
    out += ["", "| target | measured | verdict |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in verdicts(sb)]
    if sb.get("runner_summary"):
        out += ["", f"Runner: `{sb['runner_summary']}`"]
    return [*out, ""]
