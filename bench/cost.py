"""Monthly on-demand cost from counted calls. Prices are assumptions, stated in the report.

us-east-1 on-demand list prices (checked for this report; free tiers ignored):
DynamoDB $0.625 per million write request units and $0.125 per million read request units
(one WRU per item write up to 1 KB: a lease item is ~200 bytes; one RRU per strongly consistent
read up to 4 KB, 0.5 for an eventually consistent index query page); SQS $0.40 per million
requests; Lambda $0.20 per million requests plus $0.0000166667 per GB-second.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRICES", "monthly_cost"]

PRICES = {"wru_per_million": 0.625, "rru_per_million": 0.125, "sqs_per_million": 0.40,
          "lambda_req_per_million": 0.20, "lambda_gb_s": 0.0000166667}
HOURS_PER_MONTH = 730
WRITE_OPS = ("UpdateItem", "PutItem", "DeleteItem", "BatchExecuteStatement", "BatchWriteItem",
             "TransactWriteItems", "ExecuteStatement")
READ_OPS = ("GetItem", "Query", "Scan", "BatchGetItem")


def _per_hour(section: dict[str, Any], ops: tuple[str, ...], what: str) -> float:
    return float(sum(float(v[what]) for op, v in section.items() if op in ops))


def monthly_cost(steady: dict[str, Any], *, connections: int = 500, workers: int = 2,
                 bench_heartbeat_s: float, prod_heartbeat_s: float = 5.0,
                 mode: str) -> dict[str, Any]:
    """Scale the measured per-connection-hour counts to production timing and price them.

    Per-connection items (lease writes) scale with 1/heartbeat. Per-worker fixed calls (SQS
    long polls of 20 s, a reconcile query per 60 s) and the sweeper (one 256 MB invocation per
    minute running ~50 s of 1 s sweeps, one index query each) are priced from the design, since
    the bench runs them at compressed periods.
    """
    scale = bench_heartbeat_s / prod_heartbeat_s
    ddb = steady.get("worker_dynamodb", {})
    writes_items = _per_hour(ddb, WRITE_OPS, "items_per_conn_hour") * scale
    measured_calls = _per_hour(ddb, WRITE_OPS, "calls_per_conn_hour") * scale
    # The bench's workers hold few streams each, so their batches are short; a production
    # worker holding >= 25 fills every PartiQL batch. Measured items per call, capped at 25:
    per_call = writes_items / measured_calls if measured_calls else 1.0
    per_worker = connections / workers
    batch = min(25.0, per_worker) if per_call > 1.01 else 1.0
    write_calls = writes_items / batch
    conn_hours = connections * HOURS_PER_MONTH
    wru = writes_items * conn_hours
    worker_hours = workers * HOURS_PER_MONTH
    rru = worker_hours * 60.0  # one reconcile index query per worker-minute
    sqs = 0.0
    lam_req = lam_gbs = 0.0
    if mode == "ours":
        sqs = worker_hours * 2 * 3600 / 20  # two pollers, 20 s long polls
        minutes = HOURS_PER_MONTH * 60
        lam_req = minutes  # the sweeper's schedule; router invocations only on lease moves
        lam_gbs = minutes * 50 * 0.25
        rru += minutes * 50 * 0.5  # the sweeper's index queries
    dollars = {
        "dynamodb_writes": wru / 1e6 * PRICES["wru_per_million"],
        "dynamodb_reads": rru / 1e6 * PRICES["rru_per_million"],
        "sqs": sqs / 1e6 * PRICES["sqs_per_million"],
        "lambda": lam_req / 1e6 * PRICES["lambda_req_per_million"]
        + lam_gbs * PRICES["lambda_gb_s"],
    }
    return {"connections": connections, "workers": workers,
            "prod_heartbeat_s": prod_heartbeat_s,
            "lease_writes_per_conn_hour": round(writes_items, 1),
            "write_round_trips_per_conn_hour": round(write_calls, 1),
            "bench_items_per_write_call": round(per_call, 1),
            "monthly_usd": {k: round(v, 2) for k, v in dollars.items()},
            "monthly_usd_total": round(sum(dollars.values()), 2)}
