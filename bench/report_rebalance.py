"""Report section for rebalancing (``bench.rebalance``): scale-out 2 -> 4 workers, as Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report_production import _dist, load_md

__all__ = ["MOVES_SLACK", "rebalance_md", "rebalance_rows", "write_rebalance"]

MOVES_SLACK = 1.1  # moves may exceed the least that must move by 10 % (and never twice)


def _judge(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "**NOT met**")


def _num(e: dict[str, Any], key: str) -> float | None:
    v = e.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def rebalance_rows(e: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, measured, target, verdict) rows of one variant's figures."""
    target_s = float(e.get("target_balanced_s", 30.0))
    target_p99 = float(e.get("target_unowned_p99_s", 1.0))
    bal = _num(e, "balanced_s")
    last = _num(e, "last_move_s")
    rows = [("time until balanced (both new workers ready -> every worker within "
             "±max(1, 10 %) of its share)",
             "never (within the timeout)" if bal is None and "moves" in e else
             f"{bal:.1f} s (last move at {last:.1f} s)" if bal is not None and last is not None
             else "-", f"<= {target_s:g} s", _judge(None if bal is None and "moves" not in e
                                                    else bal is not None and bal <= target_s))]
    mv, least = e.get("moves"), e.get("min_moves")
    twice = e.get("moved_twice") or []
    ok = None if mv is None or least is None else (
        mv <= max(least, least * MOVES_SLACK) and not twice)
    rows.append(("moves (acquisitions after the scale-out) vs the least that must move",
                 "-" if mv is None else
                 f"{mv} vs {least} (claims logged {e.get('claims_logged')}, sheds logged "
                 f"{e.get('sheds_logged')}, streams moved twice {len(twice)})",
                 f"<= {MOVES_SLACK:g} x the least, none twice", _judge(ok)))
    un = e.get("unowned_s") or {}
    p99 = un.get("p99")
    rows.append(("unowned time per move (release -> claim, the claimer's `unowned_ms`), "
                 "p50 / p99 / max s", _dist(un), f"p99 <= {target_p99:g} s",
                 _judge(None if p99 is None else p99 <= target_p99)))
    if e.get("gap_per_move_s"):
        rows.append(("delivery gap per move (the old deliverer's last message -> the new "
                     "one's first; the feed's 0.1 s spacing included), p50 / p99 / max s",
                     _dist(e["gap_per_move_s"]), "-", "shown"))
        added = e.get("added_per_move_s") or {}
        rows.append(("delay a move added (the gap less the stream's usual spacing), "
                     "p50 / p99 / max s", _dist(added), "-", "shown"))
    most, bound = e.get("max_unowned_at_once"), e.get("motion_bound")
    if most is not None and bound is not None:
        rows.append(("moved streams unowned at once, most (release written -> claimed)",
                     str(most), f"<= {bound} (the decider's motion bound, 10 % of the streams)",
                     _judge(most <= bound)))
    for key, label in (("duplicates", "duplicates (seqs handled twice)"),
                       ("seq_gap", "lost (seqs never handled between the first and last)")):
        v = e.get(key)
        rows.append((label, "-" if v is None else str(v), "0",
                     _judge(None if v is None else v == 0)))
    qm = e.get("quiet_moves")
    quiet = (None if qm is None else qm == 0 and not e.get("quiet_sheds_logged")
             and not e.get("quiet_claims_logged"))
    rows.append((f"moves in the quiet {float(e.get('quiet_s', 0)) / 60:g} min after it settled",
                 "-" if qm is None else f"{qm} (sheds logged {e.get('quiet_sheds_logged')}, "
                 f"claims logged {e.get('quiet_claims_logged')})", "0", _judge(quiet)))
    back = e.get("straight_back")
    rows.append((f"streams claimed back by the worker that shed them within the cool-down "
                 f"({float(e.get('cooldown_s', 0)):g} s)", "-" if back is None else
                 str(len(back)) + (f" ({', '.join(back[:5])})" if back else ""), "0",
                 _judge(None if back is None else not back)))
    stalled = e.get("stalled")
    if stalled:
        rows.append(("streams not handled in the last 3 s of the quiet period",
                     f"{len(stalled)} ({', '.join(stalled[:5])})", "0", _judge(False)))
    return rows


def _variant_md(e: dict[str, Any]) -> list[str]:
    name = e.get("variant", "?")
    timing = (f"lease {e.get('lease_s'):g} s, heartbeat {e.get('heartbeat_s'):g} s, "
              f"cool-down {e.get('cooldown_s'):g} s, a decision every "
              f"{e.get('balance_interval_ms')} ms" if e.get("lease_s") is not None else "")
    out = [f"### {'Production defaults' if name == 'production' else 'Scaled timings'} "
           f"({timing})", ""]
    if e.get("error"):
        out += [f"**Failed: {e['error']}**", ""]
    out += ["| figure | measured | target | verdict |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rebalance_rows(e)]
    out += ["", f"Held at the scale-out: {e.get('held_before')}; when first balanced: "
            f"{e.get('held_at_balanced')}; settled: {e.get('held_settled')}. The new workers "
            f"were ready {e.get('workers_ready_s')} s after they were started. Sheds counted "
            f"in the workers' final log lines: {e.get('shed_counted')}. Logs: "
            f"`{e.get('logs')}`.", ""]
    if e.get("command"):
        out += [f"Command: `{e['command']}`", ""]
    return out


def rebalance_md(rb: dict[str, Any]) -> list[str]:
    """The section: what was run, then one table per variant present."""
    variants = [rb[k] for k in ("production", "scaled") if rb.get(k)]
    n = next((v.get("streams") for v in variants), 100)
    out = [f"## Rebalancing: scale-out from 2 to 4 workers (N = {n})", "",
           "Two workers hold every stream past the cool-down, then two more start (t0: both "
           "ready). The lease table is polled (owner of each stream, `lease_epoch`) until "
           "every stream is owned and every worker is within ±max(1, 10 %) of its fair share "
           "(total / workers). Moves are the claimers' `claimed` lines after the scale-out; "
           "the least that must move is what the two first workers held above the new share. "
           "Unowned time per move is the claimer's `unowned_ms` on its `claimed` line for streams "
           "with `moved_at_ms` (0 for a warm handoff, which never leaves the stream "
           "unowned); the delivery gap per move is the old deliverer's last handled message to "
           "the new one's first, and the delay a move added that gap less the stream's usual "
           "spacing. Lost and duplicates come from the handled records of every "
           "stream over the whole run. After nothing moved for 10 s, a quiet period in which "
           "nothing may move (`shedding stream` and `claimed` log lines).", ""]
    for v in variants:
        out += _variant_md(v)
    return out


def write_rebalance(result: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """``<stem>.json`` and ``<stem>.md`` of a rebalancing run alone."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = [f"# Holdfast benchmark report ({result.get('date', '?')})", "",
          *rebalance_md(result.get("rebalance", {})), *load_md(result)]
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md"]
    paths[0].write_text(json.dumps(result, indent=1, default=str) + "\n")
    paths[1].write_text("\n".join(md).rstrip() + "\n")
    return paths
