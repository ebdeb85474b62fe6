"""Write and read units of every operation of the session design and the seed's.

Runs each request of ``bench/design_ops.py`` on DynamoDB Local (tables from
``holdfast.core.schema``) with ``ReturnConsumedCapacity=INDEXES`` and writes a table of
operation -> units on the lease table, each of its indexes and the session table:

    .venv/bin/python -m bench.capacity [--out bench/results/capacity.json]   # ~20 s

Writes are measured on 25 items each and reported per item; reads per call. Each PartiQL form
is sent as one ``BatchExecuteStatement`` of 25 statements, checked to have applied, and if
DynamoDB Local reports no ``ConsumedCapacity`` for it (it does not, as of 2026-12) its units are
those of the equivalent ``UpdateItem``, said so in ``source``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3

from bench import design_ops as ops
from bench.meter import role_of
from holdfast.chaos.consumed import reported_units
from holdfast.core.schema import owner_for, pk_for
from holdfast.core.table import create_stream
from holdfast.fleet.procs import REPO_ROOT
from holdfast.localaws import LocalAws

__all__ = ["OUT", "ROLES", "main", "measure", "roles_of", "run_local"]

ROLES = ("lease_table", "seed_index", "owner_index", "session_table")
OUT = REPO_ROOT / "bench" / "results" / "capacity.json"
N = 25  # items per write measurement: one full PartiQL batch
SEED_LEASE_MS = 20_000
Client = Any


def roles_of(consumed: Any, lease: str, session: str, kind: str = "write") -> dict[str, float]:
    """A ``ConsumedCapacity`` value as units per role (lease_table, seed_index, ...)."""
    out: dict[str, float] = {}
    entries = consumed if isinstance(consumed, list) else [consumed]
    for key, units in reported_units("op", "read" if kind == "read" else "write", entries):
        role = role_of(key.table, key.part, lease, session)
        out[role] = out.get(role, 0.0) + units
    return out


class _Bench:
    def __init__(self, ddb: Client, lease: str, session: str) -> None:
        self.ddb, self.lease, self.session = ddb, lease, session
        self.now = 1_800_000_000_000  # fixed: no clock in the figures
        self.ops: dict[str, dict[str, Any]] = {}
        self.partiql_reported: list[bool] = []

    def tick(self) -> int:
        self.now += 1000
        return self.now

    def writes(self, name: str, what: str, build: Callable[[int], dict[str, Any]],
               count: int = N, call: str = "update_item") -> None:
        """``count`` single writes; units per item (all calls must agree)."""
        seen: list[dict[str, float]] = []
        for i in range(count):
            resp = getattr(self.ddb, call)(**build(i), ReturnConsumedCapacity="INDEXES")
            seen.append(roles_of(resp.get("ConsumedCapacity") or {}, self.lease, self.session))
        self.ops[name] = _entry(what, "UpdateItem" if call == "update_item" else call, seen,
                                count, count)

    def batch(self, name: str, what: str, statements: list[dict[str, Any]], equivalent: str,
              check: Callable[[], bool]) -> None:
        """One ``BatchExecuteStatement``; units per statement, reported or the equivalent's."""
        resp = self.ddb.batch_execute_statement(Statements=statements,
                                                ReturnConsumedCapacity="INDEXES")
        errors = [r["Error"] for r in resp.get("Responses", []) if "Error" in r]
        if errors or not check():
            raise RuntimeError(f"{name}: the batch did not apply: {errors[:2]}")
        reported = resp.get("ConsumedCapacity")
        self.partiql_reported.append(bool(reported))
        if reported:
            total = roles_of(reported, self.lease, self.session)
            units = {k: v / len(statements) for k, v in total.items()}
            self.ops[name] = {**_entry(what, "BatchExecuteStatement", [units], 1,
                                       len(statements)), "source": "reported"}
            return
        base = self.ops[equivalent]
        self.ops[name] = {**base, "what": what, "form": "BatchExecuteStatement", "calls": 1,
                          "items": len(statements), "reported": None,
                          "source": f"UpdateItem equivalent ({equivalent}): DynamoDB Local "
                                    "reports no ConsumedCapacity for BatchExecuteStatement"}

    def read(self, name: str, what: str, kwargs: dict[str, Any], call: str) -> None:
        """One read, every page; units per call and items returned."""
        units: dict[str, float] = {}
        items = pages = 0
        while True:
            resp = getattr(self.ddb, call)(**kwargs, ReturnConsumedCapacity="INDEXES")
            pages += 1
            items += int(resp.get("Count", 0))
            for k, v in roles_of(resp.get("ConsumedCapacity") or {}, self.lease, self.session,
                                 "read").items():
                units[k] = units.get(k, 0.0) + v
            if "LastEvaluatedKey" not in resp:
                break
            kwargs = {**kwargs, "ExclusiveStartKey": resp["LastEvaluatedKey"]}
        self.ops[name] = {"what": what, "form": call.title().replace("_", ""), "per": "call",
                          "kind": "read", "units": units, "total": round(sum(units.values()), 3),
                          "items": items, "calls": pages, "source": "reported"}

    def item(self, conn_id: str) -> dict[str, Any]:
        got: dict[str, Any] = self.ddb.get_item(TableName=self.lease,
                                                Key={"Pk": {"S": pk_for(conn_id)}},
                                                ConsistentRead=True)["Item"]
        return got


def _entry(what: str, form: str, seen: list[dict[str, float]], calls: int, items: int
           ) -> dict[str, Any]:
    units = {r: round(sum(s.get(r, 0.0) for s in seen) / len(seen), 3)
             for r in sorted({r for s in seen for r in s})}
    return {"what": what, "form": form, "per": "item", "kind": "write", "units": units,
            "total": round(sum(units.values()), 3), "calls": calls, "items": items,
            "uniform": all(s == seen[0] for s in seen), "source": "reported"}


def measure(ddb: Client, lease: str, session: str) -> dict[str, Any]:
    """Every operation of both designs; the ``ops`` table (see the module docstring)."""
    b = _Bench(ddb, lease, session)
    me, dead = owner_for("cap-w1", "inc1"), owner_for("cap-dead", "inc0")
    a, p, s, o = ([f"cap-{k}-{i:03d}" for i in range(n)]
                  for k, n in (("a", N), ("p", N), ("s", N), ("o", 100)))
    for cid in (*a, *p, *s, *o):
        create_stream(ddb, lease, cid, f"wss://upstream.example.com/streams/{cid}")
    sess = session

    def held(conn_id: str, epoch: int) -> ops.Held:
        return ops.Held(lease, conn_id, me, epoch)

    b.writes("acquire", "claim: owner index put, seed index entry moves",
             lambda i: ops.acquire(lease, a[i], me, b.tick(), f"tok{i}"))
    b.writes("checkpoint", "last_seq moved; no index key touched",
             lambda i: ops.checkpoint(held(a[i], 1), 10, b.tick()))
    b.writes("backstop_refresh", "checkpoint + expiry = now + BACKSTOP_MS (seed index moves)",
             lambda i: ops.checkpoint(held(a[i], 1), 20, b.tick(), backstop=True))
    b.writes("release", "expiry 0, REMOVE owner (owner entry deleted, seed entry moves)",
             lambda i: ops.release(held(a[i], 1), 30, b.tick()))
    # PartiQL forms, on their own items (claimed first, not measured).
    for i, cid in enumerate(p):
        ddb.update_item(**ops.acquire(lease, cid, me, b.tick(), f"tp{i}"))
    now = b.tick()
    b.batch("checkpoint_batch", "checkpoint, 25 statements per call",
            [ops.checkpoint_statement(held(c, 1), 10, now) for c in p], "checkpoint",
            lambda: all(int(b.item(c)["last_seq"]["N"]) == 10 for c in p))
    now = b.tick()
    b.batch("backstop_refresh_batch", "backstop refresh, 25 per call",
            [ops.checkpoint_statement(held(c, 1), 20, now, backstop=True) for c in p],
            "backstop_refresh", lambda: all(int(b.item(c)["lease_expires_at_ms"]["N"]) > now
                                            for c in p))
    now = b.tick()
    b.batch("release_batch", "release, 25 per call",
            [ops.release_statement(held(c, 1), 30, now) for c in p], "release",
            lambda: all("lease_owner" not in b.item(c) for c in p))
    now = b.tick()
    b.batch("acquire_batch", "claim, 25 per call (items that already have an epoch)",
            [ops.acquire_statement(lease, c, me, now, "tq") for c in p], "acquire",
            lambda: all(int(b.item(c)["lease_epoch"]["N"]) == 2 for c in p))
    # The seed design: lease 20 s, each heartbeat moves the expiry and carries last_seq.
    for i, cid in enumerate(s):
        ddb.update_item(**ops.acquire(lease, cid, me, b.tick(), f"ts{i}", lease_ms=SEED_LEASE_MS))
    b.writes("seed_heartbeat", "the seed's per-stream renewal (expiry moves, last_seq carried)",
             lambda i: ops.seed_heartbeat(held(s[i], 1), 10, b.tick(), SEED_LEASE_MS))
    now = b.tick()
    b.batch("seed_heartbeat_batch", "the seed's renewal, 25 per call (holdfast.core.batch)",
            [ops.seed_heartbeat_statement(held(c, 1), 20, now, SEED_LEASE_MS) for c in s],
            "seed_heartbeat", lambda: all(int(b.item(c)["last_seq"]["N"]) == 20 for c in s))
    # Session table: one live worker heartbeating, 25 dead ones marked by the sweeper.
    ddb.put_item(**ops.session_item(sess, "cap-w1", "inc1", b.now, ttl_ms=8000))
    for i in range(N):
        ddb.put_item(**ops.session_item(sess, f"cap-dead-{i:02d}", "inc0", b.now - 60_000,
                                        ttl_ms=8000))
    b.writes("session_heartbeat", "one per worker per heartbeat (ALL_NEW)",
             lambda i: ops.session_heartbeat(sess, "cap-w1", "inc1", b.tick(), ttl_ms=8000,
                                             held=100, capacity=1000))
    b.writes("session_mark_dead", "the sweeper marks a silent session DEAD",
             lambda i: ops.session_mark_dead(sess, f"cap-dead-{i:02d}", "inc0", b.tick()))
    # Reads: the sweeper's scan over 1,000 sessions, its orphan query, a dead owner's streams.
    workers = [f"w-{i:04d}-{'0' * 24}" for i in range(1000 - N - 1)]
    for k in range(0, len(workers), 25):
        ddb.batch_write_item(RequestItems={sess: [
            {"PutRequest": {"Item": ops.session_item(sess, w, "0123456789abcdef", b.now,
                                                      ttl_ms=8000)["Item"]}}
            for w in workers[k:k + 25]]})
    b.read("sweeper_scan", "Scan of 1,000 sessions (eventually consistent)",
           ops.sweep_scan(sess), "scan")
    b.read("orphan_query", "Query of the seed index, nothing due (sweeper; seed's reconcile)",
           ops.orphan_query(lease, 0, 1), "query")
    for i, cid in enumerate(o):
        ddb.update_item(**ops.acquire(lease, cid, dead, b.tick(), f"to{i}"))
    b.read("owner_query", "Query of the owner index: a dead session's 100 streams",
           ops.owner_query(lease, dead), "query")
    try:
        ddb.update_item(**ops.checkpoint(held(a[0], 99), 40, b.tick()),
                        ReturnConsumedCapacity="INDEXES")
        refused: Any = "not refused?"
    except ddb.exceptions.ConditionalCheckFailedException as exc:
        refused = exc.response.get("ConsumedCapacity")
    return {"ops": b.ops, "refused_write_reports": refused,
            "partiql_reports_capacity": any(b.partiql_reported)}


def run_local(out: Path | None = OUT) -> dict[str, Any]:
    """Start DynamoDB Local, measure, write ``out`` (if given); the result."""
    with LocalAws(backend="dynamodb-local") as aws:
        ddb = boto3.session.Session().client(
            "dynamodb", endpoint_url=aws.dynamodb_url, region_name="us-east-1",
            aws_access_key_id="local", aws_secret_access_key="local")
        result = {"backend": "dynamodb-local",
                  "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                  "tables": {"lease": aws.table, "session": aws.session_table},
                  **measure(ddb, aws.table, aws.session_table)}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    result = run_local(args.out)
    for name, op in result["ops"].items():
        print(f"{name:24} {op['form']:22} {op['total']:>6} per {op['per']:4} {op['units']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
