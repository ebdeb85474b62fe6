"""Graceful handover A/B: ``python -m bench.ab_handover {session|seed} RUN_DIR``.

One run of ``scenarios.handover`` (N = 100, SIGTERM, 2 rounds) on the short-timing fleet:
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
from holdfast.fleet.procs import FleetTiming

__all__ = ["main"]

STREAMS = 100


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("session", "seed"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, run_dir = args[0], Path(args[1])
    bf = BenchFleet(run_dir, "ours" if mode == "session" else "baseline", FleetTiming()).start()
    try:
        r = handover(bf, STREAMS, signal.SIGTERM, rounds=2, timeout_s=60, tag=mode)
    finally:
        bf.close()
    samples = r.pop("samples")
    r["rounds_latency_s"] = [dist(samples[i:i + STREAMS])
                             for i in range(0, len(samples), STREAMS)]
    print(json.dumps({"mode": mode, **r}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
