"""Cost of renewing 1,000 leases: single UpdateItems vs PartiQL batches of 25 (serial or 4-wide).

Runs on the real DynamoDB Local; counts API calls at the client (botocore events), wall time and
the client's CPU time (boto3 serialisation and signing). Prints a table and writes JSON.

    .venv/bin/python bench/renew_cost.py [--leases 1000] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from holdfast.core.batch import RenewMode, RenewRequest, renew_many
from holdfast.core.boto import new_session
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with LocalAws(backend="dynamodb-local") as aws:
        env = aws.env()
        ddb: Any = new_session().client(
            "dynamodb", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"], region_name="us-east-1",
            aws_access_key_id="local", aws_secret_access_key="local")
        store, ids, calls = counted_streams(ddb, aws.table, args.leases)
        leases = [store.acquire(cid, "bench-worker") for cid in ids]
        results: dict[str, Any] = {"leases": args.leases, "backend": "dynamodb-local"}
        pool = ThreadPoolExecutor(max_workers=4)  # what the worker's renewer uses
        for mode in ("single", "batch", "batch-pool4"):
            walls, cpus, ncalls = [], [], []
            for r in range(args.rounds):
                calls.clear()
                reqs = [RenewRequest(lease, r * 10 + 1) for lease in leases]
                w0, c0 = time.perf_counter(), time.process_time()
                out = renew_many(store, reqs, mode_of(mode),
                                 pool=pool if mode.endswith("pool4") else None)
                walls.append(time.perf_counter() - w0)
                cpus.append(time.process_time() - c0)
                ncalls.append(len(calls))
                assert all(o.error is None for o in out), [o.error for o in out if o.error][:3]
                leases = [o.lease for o in out if o.lease is not None]
            results[mode] = {"calls": statistics.median(ncalls),
                             "wall_s": round(statistics.median(walls), 3),
                             "client_cpu_s": round(statistics.median(cpus), 3),
                             "client_cpu_ms_per_renewal": round(
                                 1000 * statistics.median(cpus) / args.leases, 3)}
        print(json.dumps(results, indent=2))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")


def counted_streams(ddb: Any, table: str, n: int) -> tuple[LeaseStore, list[str], list[str]]:
    """A store on ``table`` with ``n`` new streams (their ids), and the list each DynamoDB
    operation ``ddb`` makes from then on is appended to."""
    calls: list[str] = []
    ddb.meta.events.register("before-call.dynamodb.*",
                             lambda model, **_: calls.append(model.name))
    store = LeaseStore(ddb, table, lease_ms=20_000, skew_ms=1_000)
    ids = [f"bench-{i}" for i in range(n)]
    for cid in ids:
        create_stream(ddb, table, cid, "ws://127.0.0.1:9/s/x")
    return store, ids, calls


def mode_of(name: str) -> RenewMode:
    return "batch" if name.startswith("batch") else "single"


if __name__ == "__main__":
    main()
