"""Report sections on DynamoDB capacity: units per operation (``bench.capacity``), the hot-key
model (``bench.hotkeys``) and consumed capacity at production timings (``bench.cost_scenario``).
``model_summary`` computes the model's figures as JSON; the ``*_md`` functions render Markdown.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.cost import FLEETS, HOURS_PER_MONTH, PRICES
from bench.hotkeys import (
    DOCUMENTED,
    PARTITION_WCU_LIMIT,
    Design,
    Fleet,
    Load,
    Units,
    failover,
    pace_for_limit,
    per_connection_hour,
    steady,
    units_from_capacity,
)

__all__ = ["capacity_md", "consumed_md", "model_md", "model_summary"]

ROLES = ("lease_table", "seed_index", "owner_index", "session_table")
TABLE_QUOTA = 40_000  # default on-demand quota per table, read and write units/s (adjustable)
DESIGNS = {"sessions": "sessions (ours)", "seed": "seed: per-stream heartbeats"}


def _load(load: Load) -> dict[str, Any]:
    return {"lease_key": round(load.lease_key, 2), "started_key": round(load.started_key, 1),
            "owner_key": round(load.owner_key, 1), "session_key": round(load.session_key, 2),
            "total_wcu_s": round(load.total_wcu_s, 1), "total_rcu_s": round(load.total_rcu_s, 1),
            "hot": load.hot()}


def model_summary(capacity: dict[str, Any] | None, fleet: Fleet | None = None,
                  naive_rate_s: float = 1000.0) -> dict[str, Any]:
    """The model's figures for ``fleet`` (100,000 streams on 1,000 workers by default), from
    the measured units (or the documented ones without a measurement). ``naive_rate_s``: an
    unpaced failover's release and claim rate, to show what pacing avoids."""
    f = fleet or Fleet()
    units: Units = units_from_capacity(capacity) if capacity else DOCUMENTED
    out: dict[str, Any] = {"fleet": {"streams": f.streams, "workers": f.workers,
                                     "heartbeat_s": f.heartbeat_s, "checkpoint_s": f.checkpoint_s,
                                     "seed_heartbeat_s": f.seed_heartbeat_s,
                                     "backstop_ms": f.backstop_ms},
                           "units_from": "measured" if capacity else "documented",
                           "limit_wcu_s": PARTITION_WCU_LIMIT, "designs": {}}
    designs: tuple[Design, ...] = ("sessions", "seed")
    for design in designs:
        paced = pace_for_limit(design, f, u=units)
        safe = pace_for_limit(design, f, u=units, headroom=0.8)
        naive = failover(design, f, naive_rate_s, naive_rate_s, u=units)
        out["designs"][design] = {
            "monthly_writes_usd": [
                {"connections": c, "workers": w, "usd": round(
                    per_connection_hour(design, replace(f, streams=c, workers=w), units)["total"]
                    * c * HOURS_PER_MONTH / 1e6 * PRICES["wru_per_million"], 2)}
                for c, w in FLEETS],
            "steady": _load(steady(design, f, units)),
            "per_conn_hour": per_connection_hour(design, f, units),
            "failover_paced": None if paced is None else {
                "rate_s": round(paced.releases_s, 1), "moved": paced.moved,
                "duration_s": round(paced.duration_s, 1), "load": _load(paced.load)},
            "failover_paced_80": None if safe is None else {
                "rate_s": round(safe.releases_s, 1), "moved": safe.moved,
                "duration_s": round(safe.duration_s, 1), "load": _load(safe.load)},
            "failover_unpaced": {"rate_s": naive_rate_s, "moved": naive.moved,
                                 "duration_s": round(naive.duration_s, 1),
                                 "load": _load(naive.load)}}
    return out


def capacity_md(cap: dict[str, Any]) -> list[str]:
    out = ["## DynamoDB units per operation (DynamoDB Local, ReturnConsumedCapacity=INDEXES)", "",
           f"Measured {cap.get('measured_at', '?')} by `python -m bench.capacity`, calling the "
           "real code (`holdfast.core`, and `bench.seed_worker` for the seed) on a metered "
           "client; writes per item (averaged over 25), reads per call. Seed index = "
           "`desired_state-lease_expires_at_ms-index`, owner index = `lease_owner-index`.", "",
           "| operation | form | lease table | seed index | owner index | session table | "
           "total | per | source |", "|---|---|---|---|---|---|---|---|---|"]
    for name, op in cap.get("ops", {}).items():
        cells = " | ".join(f"{op['units'].get(r, 0):g}" for r in ROLES)
        src = ("UpdateItem equivalent" if op["source"].startswith("UpdateItem equivalent")
               else op["source"])
        out.append(f"| {name} | {op['form']} | {cells} | {op['total']:g} | {op['per']} | "
                   f"{src} |")
    out += ["", "DynamoDB Local reports **no** `ConsumedCapacity` for `BatchExecuteStatement` "
            "(nor `ExecuteStatement`, nor a write refused by its condition): the batch rows "
            "apply the same statements 25 per call, checked to have landed, and carry the units "
            "of the equivalent `UpdateItem`."
            if not cap.get("partiql_reports_capacity") else
            "DynamoDB Local reported the batch rows itself.",
            "An empty `Query` is reported as 0 by DynamoDB Local; AWS bills at least 0.5 per "
            "eventually consistent read, which the model assumes.", ""]
    return out


def _key(v: float) -> str:
    flag = " **over**" if v > PARTITION_WCU_LIMIT * (1 + 1e-9) else ""
    return f"{v:,.1f}{flag}"


def model_md(m: dict[str, Any]) -> list[str]:
    f = m["fleet"]
    out = ["## Hot keys at scale (model: `bench/hotkeys.py`)", "",
           f"{f['streams']:,} streams on {f['workers']:,} workers; sessions: heartbeat "
           f"{f['heartbeat_s']:g} s, checkpoint {f['checkpoint_s']:g} s (every stream active), "
           f"backstop refresh every {f['backstop_ms'] / 2000:g} s; seed: heartbeat "
           f"{f['seed_heartbeat_s']:g} s. Write units per second on the busiest partition key "
           f"(limit {m['limit_wcu_s']:,.0f} WCU/s per partition); per-op units "
           f"{m['units_from']}.", "",
           "| design, phase | lease table (one stream) | seed index `STARTED` | owner index "
           "(busiest owner) | session table (one worker) | all writes WCU/s |",
           "|---|---|---|---|---|---|"]
    for design, d in m["designs"].items():
        phases = [("steady state", d["steady"])]
        for key, what in (("failover_paced", "at the limit"), ("failover_paced_80", "at 80 %")):
            if d.get(key):
                p = d[key]
                phases.append((f"failover of 10 %, paced {what}: {p['rate_s']:g} releases + "
                               f"{p['rate_s']:g} claims/s", p["load"]))
        u = d["failover_unpaced"]
        phases.append((f"failover of 10 %, unpaced at {u['rate_s']:g}/s", u["load"]))
        for phase, load in phases:
            out.append(f"| {DESIGNS[design]}, {phase} | {load['lease_key']:g} | "
                       f"{_key(load['started_key'])} | {_key(load['owner_key'])} | "
                       f"{load['session_key']:g} | {load['total_wcu_s']:,.0f} |")
    out += ["", "| design | lease table | seed index | owner index | session table | "
            "**WCU per connection-hour** | RCU per connection-hour |",
            "|---|---|---|---|---|---|---|"]
    for design, d in m["designs"].items():
        h = d["per_conn_hour"]
        out.append(f"| {DESIGNS[design]} | " + " | ".join(f"{h[r]:g}" for r in ROLES)
                   + f" | **{h['total']:g}** | {h['reads']:g} |")
    out += ["", "Monthly on-demand DynamoDB writes by the model (same timings; the session "
            "table's share depends on streams per worker): " + "; ".join(
                f"{DESIGNS[d]}: " + ", ".join(f"{c['connections']:,} connections on "
                                             f"{c['workers']} workers ${c['usd']:,.2f}"
                                             for c in m["designs"][d]["monthly_writes_usd"])
                for d in m["designs"]) + ".", ""]
    for design, d in m["designs"].items():
        p, q = d["failover_paced"], d.get("failover_paced_80")
        out.append(f"- {DESIGNS[design]}: " + (
            f"releases and claims at {p['rate_s']:g}/s each keep `STARTED` at the limit, "
            f"moving {p['moved']:,} streams in {p['duration_s']:g} s; at 80 % of it "
            f"({q['rate_s']:g}/s) in {q['duration_s']:g} s (plus detection: the session TTL "
            "and a sweep)." if p and q else
            "no failover pace keeps `STARTED` under the limit: the steady state alone is "
            f"{d['steady']['started_key'] / m['limit_wcu_s']:.0f}x over it."))
        total = d["steady"]["total_wcu_s"]
        if total > TABLE_QUOTA:
            out.append(f"  Its steady {total:,.0f} write units/s are also above the default "
                       f"on-demand quota of {TABLE_QUOTA:,} per table (adjustable).")
    return [*out, ""]


def consumed_md(prod: dict[str, Any]) -> list[str]:
    modes = [m for m in ("ours", "baseline") if prod.get(m, {}).get("metered")]
    if not modes:
        return []
    out = ["## Consumed capacity at production timings (metered at the client)", ""]
    for m in modes:
        r, w = prod[m], prod[m]["metered"]
        t = r["timing"]
        out.append(f"- **{m}**: {w['streams']} streams on {w['workers']} workers for "
                   f"{w['seconds']} s; lease {t['lease_s']:g} s, heartbeat {t['heartbeat_s']:g} "
                   f"s, checkpoint {t['checkpoint_s'] or '-'} s, liveness `{t['liveness']}`"
                   + (f"; **{r['error']}**" if r.get("error") else ""))
    out += ["", "Per connection-hour (everything the workers and the sweeper/router sent):", "",
            "| what | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    rows: dict[str, dict[str, float]] = {}
    for m in modes:
        w = prod[m]["metered"]
        for party, kinds in w["consumed_per_hour"].items():
            for kind, roles in kinds.items():
                for role, units in roles.items():
                    key = f"{'WRU' if kind == 'write' else 'RRU'} {role} ({party.split('_')[0]})"
                    rows.setdefault(key, {})[m] = units / w["streams"]
        for party, n in w["sqs_requests_per_hour"].items():
            rows.setdefault(f"SQS requests ({party.split('_')[0]})", {})[m] = n / w["streams"]
        rows.setdefault("router Lambda invocations", {})[m] = (
            w["router"]["invocations_per_hour"] / w["streams"])
    for key in sorted(rows):
        out.append(f"| {key} | " + " | ".join(f"{rows[key].get(m, 0):.2f}" for m in modes)
                   + " |")
    est = {m: {k: sum(v.get(f"estimated_{k}", 0.0)
                      for p in prod[m]["metered"]["consumed_by_op"].values() for v in p.values())
               for k in ("write", "read")} for m in modes}
    out += ["", "Estimated, not reported by DynamoDB Local (PartiQL statements, refused writes, "
            "empty reads billed at the minimum), per connection-hour: " + ", ".join(
                f"{m} {v['write']:.1f} of the WRU and {v['read']:.1f} of the RRU"
                for m, v in est.items())
            + ". The baseline is the seed's own program (`bench.seed_worker`): no queue, no "
            "Lambdas.", "", "| monthly on-demand | " + " | ".join(modes) + " |",
            "|---|" + "---|" * len(modes)]
    for i, _ in enumerate(prod[modes[0]]["monthly"]):
        c0 = prod[modes[0]]["monthly"][i]
        out.append(f"| {c0['connections']:,} connections, {c0['workers']} workers | "
                   + " | ".join(f"${prod[m]['monthly'][i]['monthly_usd_total']:,.2f} "
                                f"({prod[m]['monthly'][i]['wru_per_conn_hour']:g} WRU/conn-h)"
                                for m in modes) + " |")
    return [*out, ""]
