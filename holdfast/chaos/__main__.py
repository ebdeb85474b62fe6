"""``python -m holdfast.chaos [--minutes 10]``: soak the local fleet, print a verdict.

Exit 0 when every invariant held, 1 on any violation (each with its timeline), 3 when the soak
could not run (the fleet did not start or settle).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from holdfast.chaos.exceptions import SoakAborted
from holdfast.chaos.recheck import recheck
from holdfast.chaos.soak import SoakConfig, SoakResult, run_soak
from holdfast.chaos.timeline import timeline

__all__ = ["main", "render"]


def render(result: SoakResult) -> list[str]:
    v = result.verdict
    s = v.stats
    lines = ["", "== chaos verdict ==",
             f"connections {s.get('connections')}, messages handled {s.get('handled')} "
             f"(duplicates {s.get('duplicates')}), streams checked {s.get('streams_checked')}, "
             f"actions {s.get('actions')}, DynamoDB fault windows {s.get('faults')}",
             f"re-own gaps {s.get('reown_gaps_ms')} (bound {s.get('reown_bound_ms')} ms + fault "
             f"extensions), stop closes {s.get('stop_close_ms')}, stale connections of paused "
             f"workers {s.get('stale_connections_of_paused_workers')}, handler calls a pause "
             f"caught in flight {s.get('handler_calls_across_pauses')}, skewed worker's clock "
             f"lead seen in its writes {s.get('skewed_worker_w2_max_lead_ms')} ms"]
    for cid, sample in sorted(result.hostile.items()):
        lines.append(f"  bad input {cid!r}: status={sample.get('status')} "
                     f"owner={sample.get('owner')} state={sample.get('state')}")
    if v.ok:
        lines.append("PASS: every invariant held")
        return lines
    lines.append(f"FAIL: {len(v.violations)} violation(s)")
    for viol in v.violations[:20]:
        lines.append(f"- [{viol.kind}] {viol.text}")
        if viol.conn_id:
            lines.extend(timeline(result.evidence, viol))
    lines.append(f"evidence: {result.run_dir}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m holdfast.chaos", description=__doc__)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--interval", type=float, default=3.0, help="seconds between actions")
    p.add_argument("--run-dir", type=Path)
    p.add_argument("--recheck", type=Path, metavar="RUN_DIR",
                   help="judge a finished soak's evidence again, without running anything")
    args = p.parse_args(argv)
    if args.recheck:
        result = recheck(args.recheck)
        print("\n".join(render(result)), flush=True)
        return 0 if result.verdict.ok else 1
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="holdfast-chaos-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"chaos soak: {args.minutes:g} min, {args.workers} workers, {args.streams} streams, "
          f"seed {args.seed}; evidence in {run_dir}", flush=True)
    cfg = SoakConfig(minutes=args.minutes, workers=args.workers, streams=args.streams,
                     seed=args.seed, interval_s=args.interval)
    try:
        result = run_soak(cfg, run_dir, say=lambda s: print(s, flush=True))
    except SoakAborted as exc:
        print(f"ABORTED: {exc}", file=sys.stderr)
        return 3
    print("\n".join(render(result)), flush=True)
    return 0 if result.verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
