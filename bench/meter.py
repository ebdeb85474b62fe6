"""What a bench fleet's proxies and runner counted over a window, per hour and per
connection-hour: API calls and items, consumed DynamoDB units (by table and index, read and
write, reported or estimated), SQS requests and router Lambda invocations.

``snapshot`` does the I/O (proxy counters, the runner's log); ``window`` is pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from holdfast.chaos.consumed import CapacityKey
from holdfast.chaos.proxy import FaultProxy
from holdfast.core.schema import GSI_NAME, OWNER_INDEX_NAME

__all__ = ["Snapshot", "role_of", "snapshot", "window"]

_INVOKED = re.compile(rb"\binvoked \S+: (\d+) records? from shard \S+ in (\d+) ms")


def role_of(table: str, part: str, lease: str, session: str) -> str:
    """``lease_table`` / ``seed_index`` / ``owner_index`` / ``session_table``, else
    ``table/part``."""
    if table == lease:
        return {"table": "lease_table", GSI_NAME: "seed_index",
                OWNER_INDEX_NAME: "owner_index"}.get(part, f"lease/{part}")
    if table == session and part == "table":
        return "session_table"
    return f"{table}/{part}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Counters at one moment. ``parties``: name -> (calls, items, consumed, unpriced)."""

    parties: dict[str, tuple[dict[str, int], dict[str, int], dict[CapacityKey, float],
                             dict[str, int]]] = field(default_factory=dict)
    invocations: int = 0
    invoke_ms: int = 0


def snapshot(proxies: Mapping[str, FaultProxy | None], runner_log: Path | None) -> Snapshot:
    """Read every proxy's counters and the router invocations the runner has logged."""
    parties = {name: (p.snapshot(), p.snapshot_items(), p.snapshot_consumed(),
                      p.snapshot_unpriced()) for name, p in proxies.items() if p is not None}
    invocations = invoke_ms = 0
    if runner_log is not None and runner_log.exists():
        for m in _INVOKED.finditer(runner_log.read_bytes()):
            invocations += 1
            invoke_ms += int(m.group(2))
    return Snapshot(parties, invocations, invoke_ms)


def _delta(a: Mapping[Any, float], b: Mapping[Any, float]) -> dict[Any, float]:
    return {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0) > 0}


def window(before: Snapshot, after: Snapshot, *, streams: int, workers: int, seconds: float,
           lease: str, session: str) -> dict[str, Any]:
    """Per hour and per connection-hour between two snapshots.

    ``calls``: party -> op -> calls and items per connection-hour (the older report's shape);
    ``consumed_per_hour``: party -> kind -> role -> units per hour; ``consumed_by_op``: party
    -> op -> {read, write, estimated_read, estimated_write} per connection-hour;
    ``unpriced``: calls that reported no capacity; ``sqs_requests_per_hour``; ``router``:
    invocations and GB-s per hour (256 MB).
    """
    hours = seconds / 3600
    conn_hours = streams * hours
    out: dict[str, Any] = {"streams": streams, "workers": workers, "seconds": round(seconds, 1),
                           "calls": {}, "consumed_per_hour": {}, "consumed_by_op": {},
                           "unpriced": {}, "sqs_requests_per_hour": {}}
    for party, (calls1, items1, used1, unpriced1) in after.parties.items():
        calls0, items0, used0, unpriced0 = before.parties.get(party, ({}, {}, {}, {}))
        calls, items = _delta(calls0, calls1), _delta(items0, items1)
        out["calls"][party] = {op: {"calls_per_conn_hour": round(n / conn_hours, 1),
                                    "items_per_conn_hour": round(items.get(op, 0) / conn_hours,
                                                                 1)}
                               for op, n in sorted(calls.items())}
        if party.endswith("_sqs"):
            out["sqs_requests_per_hour"][party] = round(sum(calls.values()) / hours, 1)
            continue
        by_role: dict[str, dict[str, float]] = {}
        by_op: dict[str, dict[str, float]] = {}
        for key, units in _delta(used0, used1).items():
            role = role_of(key.table, key.part, lease, session)
            kind = by_role.setdefault(key.kind, {})
            kind[role] = kind.get(role, 0.0) + units / hours
            op = by_op.setdefault(key.op, {"read": 0.0, "write": 0.0, "estimated_read": 0.0,
                                           "estimated_write": 0.0})
            op[key.kind] += units / conn_hours
            if key.source == "estimated":
                op[f"estimated_{key.kind}"] += units / conn_hours
        out["consumed_per_hour"][party] = {
            k: {r: round(v, 2) for r, v in sorted(roles.items())} for k, roles in by_role.items()}
        out["consumed_by_op"][party] = {
            op: {k: round(v, 2) for k, v in d.items()} for op, d in sorted(by_op.items())}
        unpriced = _delta(unpriced0, unpriced1)
        if unpriced:
            out["unpriced"][party] = {k: int(v) for k, v in unpriced.items()}
    out["router"] = {"invocations_per_hour": round((after.invocations - before.invocations)
                                                   / hours, 1),
                     "gb_s_per_hour": round((after.invoke_ms - before.invoke_ms) / 1000 * 0.25
                                            / hours, 3)}
    return out
