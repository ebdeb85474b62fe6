"""Handover A/B: ``python -m bench.ab_handover {session|seed} RUN_DIR [kill [ROUNDS]]``.

One run of ``scenarios.handover`` (N = 100, SIGTERM, 2 rounds; with ``kill``: SIGKILL, a
crash failover without the platform report, ROUNDS rounds, default 1) on the short-timing fleet:
our workers with the router and the sweeper (``session``), or the seed's own program
(``seed``, ``bench.seed_worker``: per-stream leases, no router, the 12 s scaled reconcile),
printed as one JSON line with each round's distribution. Run the two
modes one after the other on a quiet machine and compare within one sitting: the 2-core box's
load moves these tails by more than the difference between the designs.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from bench.harness import BenchFleet, dist
from bench.scenarios import handover
from holdfast.fleet.deploy import added_delays, delivery_gaps
from holdfast.fleet.recorder import read_records
from holdfast.fleet.timing import FleetTiming

__all__ = ["main"]

STREAMS = 100


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    kill = len(args) >= 3 and args[2] == "kill"
    if not 2 <= len(args) <= (4 if kill else 2) or args[0] not in ("session", "seed") or (
            len(args) == 4 and not args[3].isdigit()):
        print(__doc__, file=sys.stderr)
        return 2
    mode, run_dir = args[0], Path(args[1])
    sig, rounds = (signal.SIGKILL, int(args[3]) if len(args) == 4 else 1) if kill else (
        signal.SIGTERM, 2)
    bf = BenchFleet(run_dir, "ours" if mode == "session" else "baseline", FleetTiming()).start()
    try:
        r = handover(bf, STREAMS, sig, rounds=rounds, timeout_s=90 if kill else 60, tag=mode)
    finally:
        bf.close()
    # Since make-before-break a stop hands its streams over one after another, each delivering
    # until its turn: the outage of a move is its delivery gap, not the time from the signal.
    records = [h for h in read_records(bf.pf.fleet.record_dir)
               if h.conn_id.startswith(f"{bf.mode}-{mode}-")]
    r["gap_per_move_s"] = dist([g.seconds for g in delivery_gaps(records, 0, 2**62)])
    r["added_per_move_s"] = dist(added_delays(records, 0, 2**62))
    samples = r.pop("samples")
    r["rounds_latency_s"] = [dist(samples[i:i + STREAMS])
                             for i in range(0, len(samples), STREAMS)]
    print(json.dumps({"mode": mode, "signal": sig.name, **r}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
