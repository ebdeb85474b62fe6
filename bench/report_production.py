"""Report sections at production defaults: crash failover (``bench.crash_production``) and the
CPU spent on liveness and checkpoints (``bench.density_cpu``), as Markdown lines."""

from __future__ import annotations

from typing import Any

from bench.density_cpu import HEARTBEAT_S, LEASE_S

__all__ = ["crash_production_md", "density_cpu_md", "load_md", "per_round"]

MODES = {"ours": "ours (sessions + sweeper)", "baseline": "seed (per-stream leases, reconcile)"}


def _dist(d: dict[str, Any] | None) -> str:
    if not d or not d.get("n"):
        return "-"
    return f"{d['p50']:.2f} / {d['p99']:.2f} / {d['max']:.2f} (n={d['n']})"


def _timing(t: dict[str, Any]) -> str:
    parts = [f"lease {t['lease_s']:g} s", f"heartbeat {t['heartbeat_s']:g} s"]
    if t.get("liveness") == "session":
        parts += [f"checkpoint {t['checkpoint_s']:g} s", f"sweep {t['sweep_interval_ms']} ms"]
    parts += [f"skew {t['skew_ms']} ms", f"reconcile {t['reconcile_s']:g} s",
              f"`{t['liveness']}` liveness, `{t['renew_mode']}` renewals"]
    return ", ".join(parts)


def _arith(mode: str, d: dict[str, Any]) -> str:
    if mode == "ours":
        return (f"TTL {d['ttl_s']:g} + skew {d['skew_s']:g} + sweep <= {d['sweep_s']:g} + claim: "
                f"claimable {d['earliest_s']:g} to {d['latest_before_claim_s']:g} s after the "
                f"kill (the last session heartbeat was 0 to {d['heartbeat_s']:g} s before it)")
    return (f"lease {d['lease_s']:g} + skew {d['skew_s']:g} + the survivor's next reconcile "
            f"(every {d['reconcile_s']:g} s +/- 25 %) + claim: {d['earliest_s']:g} to "
            f"{d['latest_before_claim_s']:g} s ({d['latest_unjittered_s']:g} s without the "
            "jitter)")


def load_md(r: dict[str, Any]) -> list[str]:
    """The machine's load average at the start and end of the parts that recorded it."""
    loads = r.get("load_average") or {}
    if not loads:
        return []
    return ["Load average (1 / 5 / 15 min) on this 2-core machine, shared with other work: "
            + "; ".join(f"{k}: " + " / ".join(f"{x:.2f}" for x in v)
                        for k, v in loads.items()) + ".", ""]


def per_round(entry: dict[str, Any], streams: int) -> list[tuple[float, float]]:
    """(fastest, slowest) stream of each round, when every stream of every round resumed
    (``handover`` appends the samples round by round)."""
    samples = entry.get("samples") or []
    if not streams or len(samples) != entry.get("expected_samples"):
        return []
    return [(min(samples[i:i + streams]), max(samples[i:i + streams]))
            for i in range(0, len(samples), streams)]


def crash_production_md(cp: dict[str, Any]) -> list[str]:
    modes = [m for m in ("ours", "baseline") if m in cp]
    if not modes:
        return []
    out = [f"## Crash failover at production defaults (SIGKILL, N = {cp.get('streams')})", "",
           "A worker holding every stream is killed with SIGKILL (no other signal); a survivor, "
           "started just before, takes them over. Figure: kill -> first message handled by "
           "the survivor, per stream, p50 / p99 / max in seconds over every round (n). Not "
           "scaled down:", ""]
    for m in modes:
        e = cp[m]
        if e.get("timing"):
            out.append(f"- **{MODES[m]}**: {_timing(e['timing'])}; {e.get('rounds', '?')} "
                       f"round(s); upstream {e['timing']['rate_per_stream']:g} msg/s per stream."
                       + (f" **Failed: {e['error']}**" if e.get("error") else ""))
    out += ["", "| design | SIGKILL -> handled again | seq gap | duplicates | never resumed | "
            "target | verdict |", "|---|---|---|---|---|---|---|"]
    for m in modes:
        e = cp[m]
        target = f"max <= {cp.get('target_s', 12):g} s" if m == "ours" else "(comparison)"
        out.append(f"| {MODES[m]} | {_dist(e.get('latency_s'))} | {e.get('seq_gap')} | "
                   f"{e.get('duplicates')} | {e.get('missing')} | {target} | "
                   f"{e.get('verdict', '-')} |")
    for m in modes:
        rounds = per_round(cp[m], int(cp.get("streams") or 0))
        if len(rounds) > 1:
            out.append(f"\n{MODES[m]}, per round (first / last stream handled again, s): "
                       + "; ".join(f"{a:.2f} / {b:.2f}" for a, b in rounds) + ". The spread "
                       "within a round is the claim term: the sweeper's reap releases the dead "
                       "worker's streams in batches, the router nudges each, and the survivor "
                       "claims them ten per receive.")
    out += ["", "Detection arithmetic (from the timings alone):", ""]
    out += [f"- {MODES[m]}: {_arith(m, cp[m]['detection_s'])}." for m in modes
            if cp[m].get("detection_s")]
    out += ["", "Duplicates are the replay after a crash: the survivor resumes from the last "
            "stored checkpoint (every 20 s for ours; every heartbeat for the seed), so up to "
            "checkpoint x rate messages per stream are handled twice; a gap would be a loss.",
            ""]
    if "baseline" in modes:
        out += ["The seed's streams in one round share one reconcile phase of the survivor, so "
                "its n samples are one draw of that phase, not n independent ones.", ""]
    return out


def _c(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def density_cpu_md(entries: list[dict[str, Any]]) -> list[str]:
    if not entries:
        return []
    out = ["## CPU on liveness and checkpoints (one worker, production defaults)", "",
           f"Sessions, heartbeat {HEARTBEAT_S:g} s, lease {LEASE_S:g} s (the production "
           "defaults), upstream 1 msg/s per stream. The same N run "
           "twice, each its own worker: checkpoints every 20 s, and every 1,200 s (none in the "
           "window); the worker's CPU (its process only, from /proc) over the same window. "
           "**A/B** = the difference: what the checkpoints cost. **burst** = in the 20 s run, "
           "the CPU above the run's median (the checkpoint cycles are bursts every 20 s). "
           "**per write x rate** = client CPU per batched write (`bench/renew_cost.py`) x N / "
           f"20 s. The session heartbeat (1 UpdateItem per {HEARTBEAT_S:g} s per worker, in both "
           "runs) is "
           "added from the client CPU of one UpdateItem. In cores:", "",
           "| connections | CPU, checkpoint 20 s | CPU, checkpoint off | checkpoints A/B | "
           "burst | per write x rate | session heartbeat | liveness + checkpoints | at 5,000 "
           "| target | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        if "error" in e:
            out.append(f"| {e['streams']} | failed: {e['error'][:150]} | | | | | | | | | |")
            continue
        held = f" ({e['held']} held)" if e["held"] != e["streams"] else ""
        out.append(f"| {e['streams']}{held} | {_c(e['cpu_cores_checkpoint_20s'])} | "
                   f"{_c(e['cpu_cores_checkpoint_off'])} | {_c(e['checkpoint_cores_ab'])} | "
                   f"{_c(e['checkpoint_cores_burst'])} | "
                   f"{_c(e['checkpoint_cores_from_per_write'])} | "
                   f"{_c(e['session_heartbeat_cores'])} | "
                   f"**{_c(e['liveness_checkpoint_cores'])}** | {_c(e['cores_at_5000'])} | "
                   f"<= {e['target_cores']:g} | {e['verdict']} |")
    out += ["", "Did the checkpoints keep up (20 s run; stored `last_seq` read before and after "
            "the window, and the worker's slow-cycle warnings, logged when a cycle takes "
            "longer than the 2 s heartbeat)?", ""]
    for e in entries:
        if "error" in e:
            continue
        on = e.get("runs", {}).get("on", {})
        cp = on.get("checkpoints") or {}
        rss = ", ".join(f"{k}: {v.get('rss_per_connection_kb')} KB RSS/conn, claim "
                        f"{v.get('claim_all_s')} s" for k, v in e.get("runs", {}).items())
        out.append(f"- {e['streams']}: {cp.get('advanced')} of {cp.get('streams_read')} "
                   f"checkpoints moved in {cp.get('seconds')} s, {cp.get('mean_advance_per_s')} "
                   f"seq/s each (messages arrive at {cp.get('expected_advance_per_s')}/s); "
                   f"{cp.get('slow_cycles')} checkpoint cycles over 2 s, slowest "
                   f"{cp.get('slowest_cycle_ms')} ms (period {e['checkpoint_s']:g} s); slow "
                   f"session heartbeats {cp.get('slow_session_heartbeats')} (slowest "
                   f"{cp.get('slowest_session_heartbeat_ms')} ms), session errors "
                   f"{cp.get('session_errors')}: **kept up: {e['kept_up']}**. {rss}. "
                   f"Write rate {e['write_rate_per_s']}/s; client CPU per write: batched "
                   f"{e['client_cpu_ms_per_write']['batch']} ms, single "
                   f"{e['client_cpu_ms_per_write']['single']} ms."
                   + "".join(f" {label}: {e[key]}." for key, label in NOTES if e.get(key))
                   + "".join(f" Held counted from {r['held_from']}." for r in
                             list(e.get("runs", {}).values())[:1] if r.get("held_from")))
    return [*out, ""]


NOTES = (("kept_up_from", "Kept up judged from"),
         ("session_fences_before_window", "Outside the window"), ("reading", "Reading"))
