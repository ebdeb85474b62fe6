"""A stop's releases of 1,000 leases: one ``LeaseStore.release`` each (16 threads, the worker's
IO pool, as before ``worker.gathered``) vs ``release_many`` in PartiQL batches of 25, 4 calls
at a time (``worker.gathered.CALLS_IN_FLIGHT``).

Runs the real code on DynamoDB Local; counts API calls at the client (botocore events), wall
time and the client's CPU time. Prints JSON.

    .venv/bin/python -m bench.release_cost [--leases 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.renew_cost import counted_streams
from holdfast.core.batch import BATCH_LIMIT
from holdfast.core.batch_endings import ReleaseRequest, release_many
from holdfast.fleet.procs import client_for_env
from holdfast.localaws import LocalAws
from holdfast.worker.gathered import CALLS_IN_FLIGHT
from holdfast.worker.iothreads import IO_THREADS

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with LocalAws(backend="dynamodb-local") as aws:
        # The worker's client settings (its 32 pooled connections, timeouts and retries).
        store, ids, calls = counted_streams(client_for_env(aws.env(), "dynamodb"), aws.table,
                                            args.leases)
        results: dict[str, Any] = {"leases": args.leases, "backend": "dynamodb-local"}
        holder = 0  # each round's holder is the successor the last named (its hold lets it in)
        for mode in ("single", "batch"):
            walls, cpus, ncalls = [], [], []
            for r in range(args.rounds):
                leases = [store.acquire(cid, f"w{holder}") for cid in ids]
                holder += 1
                reqs = [ReleaseRequest(lease, r + 1, successor=f"w{holder}") for lease in leases]
                calls.clear()
                w0, c0 = time.perf_counter(), time.process_time()
                if mode == "single":
                    with ThreadPoolExecutor(IO_THREADS) as pool:
                        lost = list(pool.map(lambda q: store.release(
                            q.lease, q.handled_seq, successor=q.successor), reqs))
                    assert lost == [None] * len(reqs)
                else:
                    chunks = [reqs[i:i + BATCH_LIMIT] for i in range(0, len(reqs), BATCH_LIMIT)]
                    with ThreadPoolExecutor(CALLS_IN_FLIGHT) as pool:
                        out = [x for xs in pool.map(lambda c: release_many(store, c), chunks)
                               for x in xs]
                    assert all(o.lost is None and o.error is None for o in out)
                walls.append(time.perf_counter() - w0)
                cpus.append(time.process_time() - c0)
                ncalls.append(len(calls))
            results[mode] = {"calls": statistics.median(ncalls),
                             "wall_s": round(statistics.median(walls), 3),
                             "client_cpu_s": round(statistics.median(cpus), 3)}
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
