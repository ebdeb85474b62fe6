"""The report's deploy section (``bench.deploy``), as Markdown lines: what each deploy cost the
streams, ours beside the seed, and the targets of issue 21."""

from __future__ import annotations

from typing import Any

from holdfast.fleet.deploy import STYLES

__all__ = ["checks", "deploy_md"]

DESIGNS = {"ours": "Holdfast", "ours-single": "Holdfast, one connection", "baseline": "seed"}
GAPS = {"one_connection": "one connection at a time",
        "make_before_break": "make-before-break"}


def _s(v: Any) -> str:
    return "-" if v is None else f"{float(v):.2f}"


def _dist(d: dict[str, Any]) -> str:
    return f"{_s(d.get('p50'))} / {_s(d.get('p99'))} / {_s(d.get('max'))} s (n={d.get('n')})"


def _gap(e: dict[str, Any]) -> str:
    added = ("" if e.get("added_p99_s") is None else
             f"; added {_s(e.get('added_p50_s'))} / {_s(e.get('added_p99_s'))} / "
             f"{_s(e.get('added_max_s'))} s")
    steady = ("" if e.get("steady_p99_s") is None else
              f"; streams not moving meanwhile, between two deliveries p99 / max "
              f"{_s(e.get('steady_p99_s'))} / {_s(e.get('steady_max_s'))} s")
    return (f"{_s(e.get('gap_p50_s'))} / {_s(e.get('gap_p99_s'))} / {_s(e.get('gap_max_s'))} s "
            f"(n={e.get('gaps')}){added}{steady}")


def checks(e: dict[str, Any], targets: dict[str, float],
           connection: str | None = None) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) of one deploy's figures; met None: not measured. The delivery
    gap is judged against the target of the design's ``connection`` ("make-before-break" or
    else one connection at a time); not given (older reports), against both. Judged: the delay
    a move added (the gap less the feed's own spacing, which no move can beat), where the
    report has it; older reports, the raw gap."""
    if "moves" not in e:
        return []
    once = e["moves_max"] == 1 and e["never_moved"] == 0
    added = e.get("added_p99_s") is not None
    p99 = e.get("added_p99_s") if added else e.get("gap_p99_s")
    what = "delay a move added" if added else "delivery gap per move"
    out: list[tuple[str, str, bool | None]] = [
        ("each stream moves exactly once", f"mean {e['moves_mean']:.2f}, max {e['moves_max']}, "
         f"{e['never_moved']} never, {e['moved_more_than_once']} more than once", once),
        ("always onto a new-version worker", f"{e['moves_onto_old']} moves onto an old one "
         f"({e['streams_onto_old']} streams)", e["moves_onto_old"] == 0)]
    gaps = [k for k in GAPS if k in targets]
    if connection is not None:
        key = "make_before_break" if connection == "make-before-break" else "one_connection"
        gaps = [key] if key in targets else []
    for key in gaps:
        limit = targets[key]
        label = (f"{what} p99 <= {limit:g} s, {GAPS[key]}" if connection is None
                 else f"{what} p99 <= the design's target (" + ", ".join(
                     f"{targets[k]:g} s {GAPS[k]}" for k in GAPS if k in targets) + ")")
        out.append((label, "-" if p99 is None else f"{p99:.2f} s (target {limit:g} s)",
                    None if p99 is None else p99 <= limit))
    out.append(("0 duplicates, 0 lost seqs, none unowned at the end",
                f"{e['duplicates']} / {e['lost']} / {len(e.get('unowned_at_end') or [])}",
                not e["duplicates"] and not e["lost"] and not e.get("unowned_at_end")))
    return out


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else "met" if ok else "**NOT met**"


def _timing(mode: str, t: dict[str, Any]) -> str:
    parts = [f"lease {t['lease_s']:g} s" if mode == "baseline" else
             f"session TTL {t['lease_s']:g} s", f"heartbeat {t['heartbeat_s']:g} s",
             f"checkpoint {t['checkpoint_s']:g} s" if mode != "baseline" else
             "checkpoint at each renewal", f"skew {t['skew_ms']} ms",
             f"reconcile {t['reconcile_s']:g} s", f"shutdown budget {t['shutdown_s']:g} s"]
    if mode != "baseline":
        parts += [f"cool-down {t['cooldown_s']:g} s",
                  f"a balancing decision every {t['balance_interval_ms']} ms"]
    return ", ".join(parts)


def _handoff(h: dict[str, Any]) -> str:
    """Our workers' own account of the handoffs (``bench.deploy.handoff_figures``)."""
    if not h:
        return ""
    stops = " / ".join("-" if v is None else f"{v:g}" for v in h.get("stop_s", {}).values())
    u = h.get("unowned_s") or {}
    sources = ", ".join(f"{k} {v}" for k, v in (h.get("claim_sources") or {}).items())
    return (f"; old workers' stops {stops} s, {h.get('released')} releases in their lives, "
            f"{h.get('sessions_lost')} sessions lost; release -> claim (`unowned_ms`) "
            f"{_s(u.get('p50'))} / {_s(u.get('p99'))} / {_s(u.get('max'))} s (n={u.get('n')}); "
            f"claims by source: {sources or '-'}, {h.get('warm', 0)} on a warm socket"
            + "".join(f"; gap {label} {_dist(h[k])}" for k, label in (
                ("gap_warm_s", "taken over warm"), ("gap_not_warm_s", "otherwise"))
                if (h.get(k) or {}).get("n")))


def _note(e: dict[str, Any]) -> str:
    """The scenario's note on balance, the handoffs, and the load average around the run."""
    loads = [" / ".join(f"{x:.2f}" for x in e[k]) if e.get(k) else "-"
             for k in ("load_average_start", "load_average_end")]
    return (f"{e.get('note') or e.get('error') or '-'}{_handoff(e.get('handoff') or {})}; "
            f"load average {loads[0]} at the start, {loads[1]} at the end; "
            f"{e.get('runtime_s')} s")


def _runs(d: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m, st, d[m][st]) for m in DESIGNS if m in d for st in STYLES if st in d[m]]


def deploy_md(d: dict[str, Any]) -> list[str]:
    """The section: set-up, one row per design and style, then the targets."""
    runs = _runs(d)
    if not runs:
        return []
    n, per = d.get("workers"), d.get("streams_per_worker")
    out = [f"## Deploy: {n} workers x {per} streams replaced by new-version workers", "",
           f"Each run on a fleet of its own; the old workers run `{d.get('old_version')}`, the "
           f"new ones `{d.get('new_version')}`. `one-at-a-time`: one new worker started, live "
           f"plus {d.get('settle_s'):g} s, then one old worker SIGTERMed (as ECS does), and the "
           "next once every stream is owned again; `new-first`: every new worker, then every "
           "old one SIGTERMed at once (`holdfast.fleet.deploy_scenario.run_deploy`, the code of "
           "`holdfast up --scenario deploy`). Moves are owner changes in the deploy's window "
           "(the claimers' log lines); moves after the last stop are those after the last "
           "stop step ended (it waits up to a lease + skew + 15 s for every stream to be owned "
           "again): ours, moves among the new workers for balance; the seed, streams its "
           "reconcile had not picked up yet. The delivery gap per move is the time from the "
           "old deliverer's last handled message to the new one's first (it includes the "
           "upstream's 0.1 s spacing); the delay a move added ('added') is that gap less the "
           "stream's usual spacing (the median time between two deliveries by one worker), "
           "the figure the gap targets are judged on; duplicates and lost seqs from the "
           "handled records.", ""]
    for m, name in DESIGNS.items():
        if d.get(m, {}).get("timing"):
            how = f" Moves: {d[m]['connection']}." if d[m].get("connection") else ""
            out.append(f"- **{name}**: {_timing(m, d[m]['timing'])}.{how}")
    out += ["", "| design | style | moves per stream mean / max (more than once) | moves onto "
            "an old worker (streams) | moves after the last stop | gap per move p50 / p99 / max"
            " | duplicates / lost | unowned at the end | window |",
            "|---|---|---|---|---|---|---|---|---|"]
    for m, st, e in runs:
        if "moves" not in e:
            out.append(f"| {DESIGNS[m]} | {st} | failed: {e.get('error', '?')} |||||||")
            continue
        out.append(f"| {DESIGNS[m]} | {st} | {e['moves_mean']:.2f} / {e['moves_max']} "
                   f"({e['moved_more_than_once']}) | {e['moves_onto_old']} "
                   f"({e['streams_onto_old']}) | {e['moves_after_last_stop']} | {_gap(e)} | "
                   f"{e['duplicates']} / {e['lost']} | {len(e.get('unowned_at_end') or [])} | "
                   f"{e['window_s']:.1f} s |")
    targets = d.get("target_gap_p99_s") or {}
    heads = [(m, st) for m, st, e in runs if "moves" in e]
    if heads:
        out += ["", "Targets (issue 21; the seed's columns, if any, for comparison):", "",
                "| target | " + " | ".join(f"{DESIGNS[m]}, {st}" for m, st in heads) + " |",
                "|---" * (len(heads) + 1) + "|"]
        table = [checks(d[m][st], targets, d[m].get("connection")) for m, st in heads]
        for i, (label, _, _) in enumerate(table[0]):
            out.append(f"| {label} | " + " | ".join(
                f"{rows[i][1]}: {_verdict(rows[i][2])}" for rows in table) + " |")
    out += ["", *(f"- {DESIGNS[m]}, {st}: {_note(e)}" for m, st, e in runs), ""]
    logs = ", ".join(f"`{e.get('logs')}`" for _, _, e in runs)
    out += [f"Logs: {logs}.", ""]
    return out
