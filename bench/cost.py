"""Monthly on-demand cost from consumed units. Prices are assumptions, stated in the report.

us-east-1 on-demand list prices (free tiers ignored): DynamoDB $0.625 per million write
request units and $0.125 per million read request units; SQS $0.40 per million requests;
Lambda $0.20 per million requests plus $0.0000166667 per GB-second.

DynamoDB is priced from the units DynamoDB reported per call (``ReturnConsumedCapacity=
INDEXES``, added up by the bench's proxies): a write that moves an index key costs its index
writes too, which counting calls or items misses (the seed's heartbeat is 3 units, not 1).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FLEETS", "PRICES", "SWEEPER", "consumed_monthly", "monthly_cost"]

PRICES = {"wru_per_million": 0.625, "rru_per_million": 0.125, "sqs_per_million": 0.40,
          "lambda_req_per_million": 0.20, "lambda_gb_s": 0.0000166667}
HOURS_PER_MONTH = 730
# The priced fleets: (connections, workers).
FLEETS = ((500, 2), (10_000, 20))
# The sweeper Lambda as deployed (infra/sweeper.py): invoked once a minute, 256 MB, looping
# sweeps for up to 59.5 s of each minute.
SWEEPER = {"invocations_per_hour": 60.0, "gb_s_per_hour": 60 * 59.5 * 0.25}
WRITE_OPS = ("UpdateItem", "PutItem", "DeleteItem", "BatchExecuteStatement", "BatchWriteItem",
             "TransactWriteItems", "ExecuteStatement")
READ_OPS = ("GetItem", "Query", "Scan", "BatchGetItem")


def _per_hour(section: dict[str, Any], ops: tuple[str, ...], what: str) -> float:
    return float(sum(float(v[what]) for op, v in section.items() if op in ops))


def _lease_units_per_write(steady: dict[str, Any]) -> float | None:
    """Write units per lease write item the bench measured (table + indexes), if metered."""
    metered = steady.get("metered") or {}
    writes = (metered.get("consumed_per_hour", {}).get("worker_dynamodb", {}).get("write", {}))
    lease_units = sum(v for role, v in writes.items() if role != "session_table")
    items = _per_hour(steady.get("worker_dynamodb", {}), WRITE_OPS, "items_per_conn_hour")
    if not lease_units or not items or not metered.get("streams"):
        return None
    return float(lease_units) / float(metered["streams"]) / items


def monthly_cost(steady: dict[str, Any], *, connections: int = 500, workers: int = 2,
                 bench_heartbeat_s: float, prod_heartbeat_s: float = 5.0,
                 mode: str) -> dict[str, Any]:
    """Scale the bench-timing steady state's counts to production timing and price them.

    Per-connection items (lease writes) scale with 1/heartbeat; each is priced at the write
    units per item the proxies measured (table + indexes; 1 if nothing was metered). Per-worker
    fixed calls (SQS long polls of 20 s, a reconcile query per 60 s) and the sweeper are priced
    from the design, since the bench runs them at compressed periods. The production-timing
    scenario (``consumed_monthly``) needs no such scaling.
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
    units_per_write = _lease_units_per_write(steady) or 1.0
    conn_hours = connections * HOURS_PER_MONTH
    wru = writes_items * units_per_write * conn_hours
    worker_hours = workers * HOURS_PER_MONTH
    rru = worker_hours * 60.0 * 0.5  # one reconcile index query per worker-minute
    sqs = 0.0
    lam_req = lam_gbs = 0.0
    if mode == "ours":
        sqs = worker_hours * 2 * 3600 / 20  # two pollers, 20 s long polls
        lam_req = SWEEPER["invocations_per_hour"] * HOURS_PER_MONTH
        lam_gbs = SWEEPER["gb_s_per_hour"] * HOURS_PER_MONTH
        rru += HOURS_PER_MONTH * 3600 * 0.5  # the sweeper's index queries, one a second
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
            "write_units_per_lease_write": round(units_per_write, 2),
            "lease_wru_per_conn_hour": round(writes_items * units_per_write, 1),
            "write_round_trips_per_conn_hour": round(write_calls, 1),
            "bench_items_per_write_call": round(per_call, 1),
            "monthly_usd": {k: round(v, 2) for k, v in dollars.items()},
            "monthly_usd_total": round(sum(dollars.values()), 2)}


def _scope(party: str, kind: str, role: str) -> str:
    """What a metered unit grows with: connections (a worker's lease writes), workers (its
    session heartbeats, its own queries) or nothing (the sweeper and router: once a fleet)."""
    if party.startswith("runner"):
        return "fleet"
    return "connection" if kind == "write" and role != "session_table" else "worker"


def consumed_monthly(metered: dict[str, Any], *, connections: int, workers: int, mode: str
                     ) -> dict[str, Any]:
    """Price a production-timing window (``bench.meter.window``) for another fleet size.

    Units are split by what they grow with (``_scope``) and scaled to ``connections`` and
    ``workers``. The seed's design (``bench.seed_worker``) has no queue and no Lambdas:
    nothing but DynamoDB is billed to it. The sweeper Lambda is priced as deployed
    (``SWEEPER``); router invocations (measured) grow with connections.
    """
    streams, mworkers = metered["streams"], metered["workers"]
    divide = {"connection": streams, "worker": mworkers, "fleet": 1}
    scale = {"connection": connections, "worker": workers, "fleet": 1}
    per: dict[str, dict[str, float]] = {s: {"wru": 0.0, "rru": 0.0} for s in divide}
    for party, kinds in metered.get("consumed_per_hour", {}).items():
        for kind, roles in kinds.items():
            for role, units in roles.items():
                scope = _scope(party, kind, role)
                per[scope]["wru" if kind == "write" else "rru"] += units / divide[scope]
    hourly = {u: sum(per[s][u] * scale[s] for s in per) for u in ("wru", "rru")}
    sqs = lam_req = lam_gbs = 0.0
    if mode == "ours":
        sqs_h = metered.get("sqs_requests_per_hour", {})
        sqs = (sqs_h.get("worker_sqs", 0.0) / mworkers * workers + sqs_h.get("runner_sqs", 0.0))
        router = metered.get("router", {})
        lam_req = (router.get("invocations_per_hour", 0.0) / streams * connections
                   + SWEEPER["invocations_per_hour"])
        lam_gbs = (router.get("gb_s_per_hour", 0.0) / streams * connections
                   + SWEEPER["gb_s_per_hour"])
    h = HOURS_PER_MONTH
    dollars = {
        "dynamodb_writes": hourly["wru"] * h / 1e6 * PRICES["wru_per_million"],
        "dynamodb_reads": hourly["rru"] * h / 1e6 * PRICES["rru_per_million"],
        "sqs": sqs * h / 1e6 * PRICES["sqs_per_million"],
        "lambda": (lam_req * h / 1e6 * PRICES["lambda_req_per_million"]
                   + lam_gbs * h * PRICES["lambda_gb_s"]),
    }
    return {"connections": connections, "workers": workers,
            "wru_per_conn_hour": round(hourly["wru"] / connections, 2),
            "rru_per_conn_hour": round(hourly["rru"] / connections, 2),
            "sqs_per_conn_hour": round(sqs / connections, 2),
            "lambda_invocations_per_conn_hour": round(lam_req / connections, 3),
            "per_scope_hourly": {s: {u: round(v, 3) for u, v in d.items()}
                                 for s, d in per.items()},
            "monthly_usd": {k: round(v, 2) for k, v in dollars.items()},
            "monthly_usd_total": round(sum(dollars.values()), 2)}
