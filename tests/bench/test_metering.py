"""Metered windows, consumed-unit pricing and the capacity report sections, without a fleet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cost import SWEEPER, consumed_monthly, monthly_cost
from bench.meter import Snapshot, role_of, snapshot, window
from bench.report import markdown
from bench.report_sections import model_summary
from holdfast.chaos.consumed import CapacityKey
from holdfast.core.schema import GSI_NAME, OWNER_INDEX_NAME

L, S = "leases", "leases-sessions"


def _key(op: str, part: str, kind: str = "write", table: str = L,
         source: str = "reported") -> CapacityKey:
    return CapacityKey(op, kind, table, part, source)


def test_role_names() -> None:
    """Tables and indexes get the model's role names; anything else keeps its own."""
    assert role_of(L, "table", L, S) == "lease_table"
    assert role_of(L, GSI_NAME, L, S) == "seed_index"
    assert role_of(L, OWNER_INDEX_NAME, L, S) == "owner_index"
    assert role_of(S, "table", L, S) == "session_table"
    assert role_of("other", "table", L, S) == "other/table"


def test_window_per_hour_and_per_connection_hour() -> None:
    """Deltas between snapshots become units per hour by role and per connection-hour by op;
    SQS parties count requests; router invocations and GB-s come from the runner's log."""
    before = Snapshot({"worker_dynamodb": ({"UpdateItem": 10}, {"UpdateItem": 10},
                                           {_key("UpdateItem", "table"): 10.0}, {}),
                       "worker_sqs": ({"ReceiveMessage": 5}, {"ReceiveMessage": 5}, {}, {})},
                      invocations=2, invoke_ms=100)
    after = Snapshot({"worker_dynamodb": (
        {"UpdateItem": 20, "BatchExecuteStatement": 2}, {"UpdateItem": 20,
                                                         "BatchExecuteStatement": 50},
        {_key("UpdateItem", "table"): 20.0, _key("UpdateItem", GSI_NAME): 20.0,
         _key("BatchExecuteStatement", "table", source="estimated"): 50.0,
         _key("UpdateItem", "table", table=S): 6.0}, {"Scan": 1}),
        "worker_sqs": ({"ReceiveMessage": 15}, {"ReceiveMessage": 15}, {}, {})},
        invocations=5, invoke_ms=400)
    w = window(before, after, streams=10, workers=2, seconds=360, lease=L, session=S)
    assert w["consumed_per_hour"]["worker_dynamodb"]["write"] == {
        "lease_table": 600.0, "seed_index": 200.0, "session_table": 60.0}
    assert w["consumed_by_op"]["worker_dynamodb"]["BatchExecuteStatement"] == {
        "read": 0.0, "write": 50.0, "estimated_read": 0.0, "estimated_write": 50.0}
    assert w["calls"]["worker_dynamodb"]["BatchExecuteStatement"] == {
        "calls_per_conn_hour": 2.0, "items_per_conn_hour": 50.0}
    assert w["sqs_requests_per_hour"] == {"worker_sqs": 100.0}
    assert w["unpriced"] == {"worker_dynamodb": {"Scan": 1}}
    assert w["router"] == {"invocations_per_hour": 30.0, "gb_s_per_hour": 0.75}


def test_snapshot_reads_router_invocations(tmp_path: Path) -> None:
    """Each "invoked" line of the runner's log is one router invocation with its duration."""
    log = tmp_path / "runner.log"
    log.write_text("x INFO holdfast.runner.esm: invoked holdfast-router: 3 records from shard "
                   "s-1 in 12 ms\nother line\nx INFO holdfast.runner.esm: invoked "
                   "holdfast-router: 1 record from shard s-1 in 8 ms, retrying from record 0\n")
    snap = snapshot({}, log)
    assert (snap.invocations, snap.invoke_ms) == (2, 20)
    assert snapshot({}, tmp_path / "absent.log").invocations == 0


METERED = {"streams": 100, "workers": 2, "seconds": 120,
           "consumed_per_hour": {
               "worker_dynamodb": {"write": {"lease_table": 18_000.0, "seed_index": 400.0,
                                             "session_table": 3600.0},
                                   "read": {"seed_index": 60.0}},
               "runner_dynamodb": {"read": {"session_table": 1000.0, "seed_index": 1800.0}}},
           "sqs_requests_per_hour": {"worker_sqs": 720.0, "runner_sqs": 10.0},
           "router": {"invocations_per_hour": 0.0, "gb_s_per_hour": 0.0}}


def test_consumed_monthly_scales_each_part_by_what_it_grows_with() -> None:
    """Lease writes grow with connections, session heartbeats and worker queries with
    workers, the sweeper's reads stay once per fleet; the seed pays no SQS and no Lambda."""
    small = consumed_monthly(METERED, connections=500, workers=2, mode="ours")
    big = consumed_monthly(METERED, connections=10_000, workers=20, mode="ours")
    assert small["per_scope_hourly"]["connection"] == {"wru": 184.0, "rru": 0.0}
    assert small["per_scope_hourly"]["worker"] == {"wru": 1800.0, "rru": 30.0}
    assert small["per_scope_hourly"]["fleet"] == {"wru": 0.0, "rru": 2800.0}
    assert small["wru_per_conn_hour"] == pytest.approx(184 + 1800 * 2 / 500)
    assert big["wru_per_conn_hour"] == pytest.approx(184 + 1800 * 20 / 10_000)
    assert big["monthly_usd"]["dynamodb_writes"] == pytest.approx(
        (184 * 10_000 + 1800 * 20) * 730 / 1e6 * 0.625, abs=0.01)
    assert small["lambda_invocations_per_conn_hour"] == pytest.approx(
        SWEEPER["invocations_per_hour"] / 500)
    seed = consumed_monthly(METERED, connections=500, workers=2, mode="baseline")
    assert seed["monthly_usd"]["sqs"] == 0.0 and seed["monthly_usd"]["lambda"] == 0.0


def test_bench_timing_cost_prices_index_writes() -> None:
    """A metered steady state at 3 units per lease write costs three times the item count."""
    steady = {"worker_dynamodb": {"UpdateItem": {"calls_per_conn_hour": 3600.0,
                                                 "items_per_conn_hour": 3600.0}},
              "metered": {"streams": 10, "consumed_per_hour": {"worker_dynamodb": {
                  "write": {"lease_table": 36_000.0, "seed_index": 72_000.0}}}}}
    c = monthly_cost(steady, bench_heartbeat_s=1.0, mode="baseline")
    assert c["write_units_per_lease_write"] == 3.0
    assert c["lease_wru_per_conn_hour"] == 2160.0
    assert 490 < c["monthly_usd"]["dynamodb_writes"] < 495


def test_report_renders_capacity_model_and_consumed_sections() -> None:
    """A partial report has the capacity, model and consumed sections and no latency tables."""
    cap = {"measured_at": "t", "partiql_reports_capacity": False, "ops": {
        "checkpoint": {"form": "UpdateItem", "units": {"lease_table": 1.0}, "total": 1.0,
                       "per": "item", "source": "reported"}}}
    prod = {m: {"timing": {"lease_s": 8, "heartbeat_s": 2, "checkpoint_s": None,
                           "liveness": "session"},
                "metered": {**METERED, "seconds": 120.0, "consumed_by_op": {}},
                "monthly": [consumed_monthly(METERED, connections=500, workers=2, mode=m)]}
            for m in ("ours", "baseline")}
    text = markdown({"date": "d", "capacity": cap, "model": model_summary(None),
                     "production_cost": prod, "prices_usd": {}})
    assert "| checkpoint | UpdateItem | 1 | 0 | 0 | 0 | 1 | item | reported |" in text
    assert "no failover pace keeps `STARTED` under the limit" in text
    assert "| WRU lease_table (worker) | 180.00 | 180.00 |" in text
    assert "## Latency" not in text and "Runtime" not in text
    assert json.dumps(model_summary(None))  # the model's figures are plain JSON


def test_model_monthly_write_bill() -> None:
    """500 connections: the seed's 2,160 WRU/conn-hour cost $492.75 a month; sessions (180 +
    4 + 1,800 heartbeats / 250 streams per worker = 191.2) $43.62."""
    bills = {d: v["monthly_writes_usd"][0] for d, v in model_summary(None)["designs"].items()}
    assert bills["seed"] == {"connections": 500, "workers": 2, "usd": 492.75}
    assert bills["sessions"]["usd"] == pytest.approx(191.2 * 500 * 730 / 1e6 * 0.625, abs=0.01)
