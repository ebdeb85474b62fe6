"""Write and read units of every operation of the session design and the seed's, measured by
calling the real code on DynamoDB Local.

Each operation is a call of the code that runs in production (``holdfast.core``: the lease
store, the batch renewal, the session store and its reaper, the orphan query) or of the seed's
program (``bench.seed_worker``), on a client metered by ``bench.client_meter``: every call asks
for ``ReturnConsumedCapacity=INDEXES`` and its answer is booked per table and index. Whatever
a method sends (one write, a read and a write, a batch) is what is counted:

    .venv/bin/python -m bench.capacity [--out bench/results/capacity.json]   # ~20 s

Writes are measured on 25 items each and reported per item; reads per call. A batch renewal
(``renew_many``: one ``BatchExecuteStatement`` of 25) is checked to have applied; if DynamoDB
Local reports no ``ConsumedCapacity`` for it (it does not, as of 2026-12) its units are those of
the same renewal sent as ``UpdateItem`` (``renew_many`` in single mode), said so in ``source``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.client_meter import ClientMeter, Tally
from bench.seed_worker import SeedTable
from holdfast.core.batch import RenewRequest, renew_many
from holdfast.core.boto import new_session
from holdfast.core.exceptions import LeaseLost
from holdfast.core.model import Lease
from holdfast.core.schema import BACKSTOP_MS, SESSION, session_pk_for
from holdfast.core.sessions import SessionItem, SessionStore
from holdfast.core.store import LeaseStore
from holdfast.core.table import create_stream, find_orphans
from holdfast.fleet.procs import REPO_ROOT
from holdfast.localaws import LocalAws

__all__ = ["OUT", "ROLES", "main", "measure", "run_local"]

ROLES = ("lease_table", "seed_index", "owner_index", "session_table")
OUT = REPO_ROOT / "bench" / "results" / "capacity.json"
N = 25  # items per write measurement: one full PartiQL batch
SEED_LEASE_MS = 20_000
SKEW_MS = 1000
TTL_MS = 8000
Client = Any


class _Clock:
    """A fixed timeline (no wall clock in the figures): each reading is 1 s later."""

    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def _avg(seen: list[dict[str, float]]) -> dict[str, float]:
    roles = sorted({r for s in seen for r in s})
    return {r: round(sum(s.get(r, 0.0) for s in seen) / len(seen), 3) for r in roles}


def _entry(what: str, tallies: list[Tally], *, kind: str = "write", per: str = "item",
           items: int | None = None) -> dict[str, Any]:
    seen = [t.of(kind) for t in tallies]
    units = _avg(seen)
    out: dict[str, Any] = {
        "what": what, "form": tallies[0].form, "per": per, "kind": kind, "units": units,
        "total": round(sum(units.values()), 3), "calls": sum(len(t.calls) for t in tallies),
        "items": len(tallies) if items is None else items}
    if kind == "write":
        out["uniform"] = all(s == seen[0] for s in seen)
        if reads := _avg([t.of("read") for t in tallies]):
            out["reads"] = reads  # a write method that also reads (its GetItem, Query ...)
    unreported = sorted({c for t in tallies for c in t.unreported})
    out["source"] = "reported" if not unreported else (
        f"reported; no ConsumedCapacity from {', '.join(unreported)}")
    return out


class _Bench:
    def __init__(self, ddb: Client, lease: str, session: str) -> None:
        self.meter = ClientMeter(ddb, lease, session)
        self.ops: dict[str, dict[str, Any]] = {}
        self.partiql_reported: list[bool] = []

    def each(self, name: str, what: str, items: list[Any], call: Callable[[Any], Any]
             ) -> list[Any]:
        """``call`` once per item, each metered on its own; units per item. Its results."""
        tallies, results = [], []
        for item in items:
            with self.meter.measure() as tally:
                results.append(call(item))
            tallies.append(tally)
        self.ops[name] = _entry(what, tallies)
        return results

    def once(self, name: str, what: str, call: Callable[[], Any], *, kind: str,
             items: Callable[[Any, Tally], int]) -> Any:
        """One metered call of the real method; units per call."""
        with self.meter.measure() as tally:
            result = call()
        self.ops[name] = _entry(what, [tally], kind=kind, per="call", items=items(result, tally))
        return result

    def batch(self, name: str, what: str, leases: list[Lease],
              request: Callable[[Lease], RenewRequest], *, store: LeaseStore,
              equivalent: str) -> list[Lease]:
        """One ``renew_many`` call (a PartiQL batch); units per statement, reported or those of
        ``equivalent`` (the same write as UpdateItem). The renewed leases."""
        with self.meter.measure() as tally:
            results = renew_many(store, [request(le) for le in leases], "batch")
        renewed = [r.lease for r in results if r.lease is not None]
        if len(renewed) != len(leases) or tally.calls != ["BatchExecuteStatement"]:
            raise RuntimeError(f"{name}: the batch did not apply: {tally.calls} "
                               f"{[r.error for r in results if r.error][:2]}")
        reported = bool(tally.of("write"))
        self.partiql_reported.append(reported)
        if reported:
            units = {k: v / len(leases) for k, v in tally.of("write").items()}
            self.ops[name] = {**_entry(what, [tally]), "units": units, "items": len(leases),
                              "total": round(sum(units.values()), 3)}
        else:
            self.ops[name] = {
                **self.ops[equivalent], "what": what, "form": "BatchExecuteStatement",
                "calls": 1, "items": len(leases),
                "source": f"UpdateItem equivalent ({equivalent}): DynamoDB Local reports no "
                          "ConsumedCapacity for BatchExecuteStatement"}
        return renewed


def measure(ddb: Client, lease: str, session: str) -> dict[str, Any]:
    """Every operation of both designs; the ``ops`` table (see the module docstring)."""
    b = _Bench(ddb, lease, session)
    clock = _Clock(1_800_000_000_000)
    past = _Clock(clock.now - 3_600_000)  # sessions started then are silent past their TTL
    store = LeaseStore(ddb, lease, lease_ms=BACKSTOP_MS, skew_ms=SKEW_MS, clock=clock)
    sessions = SessionStore(ddb, session, lease, ttl_ms=TTL_MS, skew_ms=SKEW_MS, clock=clock)
    old = SessionStore(ddb, session, lease, ttl_ms=TTL_MS, skew_ms=SKEW_MS, clock=past)
    seed = SeedTable(ddb, lease, "cap-seed-w1", SEED_LEASE_MS, clock)
    # The index queries while nothing is due (an empty index): the steady state.
    b.once("orphan_query", "Query of the seed index, nothing due (sweeper, reconcile)",
           lambda: list(find_orphans(ddb, lease, now_ms=clock(), skew_ms=SKEW_MS)),
           kind="read", items=lambda r, t: len(r))
    b.once("seed_reconcile_query", "the seed's reconcile: Query of the seed index, nothing due",
           seed.due, kind="read", items=lambda r, t: len(r))
    a, p, s, d, o = ([f"cap-{k}-{i:03d}" for i in range(n)]
                     for k, n in (("a", N), ("p", N), ("s", N), ("d", N), ("o", 100)))
    for cid in (*a, *p, *s, *d, *o):
        create_stream(ddb, lease, cid, f"wss://upstream.example.com/streams/{cid}")
    # Sessions: one live worker; 25 started, then silent (marked dead); two dead holders.
    me = b.each("session_start", "a worker's session begins (no predecessor)", ["cap-w1"],
                lambda w: sessions.start(w, capacity=1000))[0]
    b.each("session_heartbeat", "one per worker per heartbeat (ALL_NEW)", [me] * N,
           lambda m: sessions.heartbeat_full(m, held=100, capacity=1000))
    silent = [old.start(f"cap-dead-{i:02d}", capacity=1000) for i in range(N)]
    b.each("session_mark_dead", "the sweeper marks a silent session DEAD",
           [_item(sessions, x.worker_id) for x in silent], sessions.mark_dead)
    # The session design's stream writes (a worker's store: expiry = the backstop).
    held = b.each("acquire", "claim (owner index entry put, seed index entry moves)", a,
                  lambda c: store.acquire(c, me.owner))
    held = b.each("checkpoint", "last_seq moved; no index key touched", held,
                  lambda le: store.renew(le, 10, extend=False))
    held = b.each("backstop_refresh", "checkpoint + expiry = now + backstop (seed index moves)",
                  held, lambda le: store.renew(le, 20))
    b.each("release", "expiry 0, owner removed (owner entry deleted, seed entry moves)", held,
           lambda le: store.release(le, 30))
    refused = _refused(b, store, held[0])
    batch = [store.acquire(c, me.owner) for c in p]
    batch = b.batch("checkpoint_batch", "checkpoint, 25 statements per call (renew_many)",
                    batch, lambda le: RenewRequest(le, 10, extend=False), store=store,
                    equivalent="checkpoint")
    b.batch("backstop_refresh_batch", "backstop refresh, 25 per call (renew_many)", batch,
            lambda le: RenewRequest(le, 20), store=store, equivalent="backstop_refresh")
    # A dead session's streams: released one by one (release_owned), or all by reap.
    dead1, dead2 = silent[0], silent[1]
    for c in d:
        store.acquire(c, dead1.owner)
    b.each("release_dead", "the reaper releases one stream of a dead session", d,
           lambda c: sessions.release_owned(c, dead1.owner, "capacity: dead"))
    for c in o:
        store.acquire(c, dead2.owner)
    b.once("owner_query", "Query of the owner index: a dead session's 100 streams",
           lambda: sessions.owned_by(dead2.owner), kind="read", items=lambda r, t: len(r))
    dead = _item(sessions, dead2.worker_id)
    b.once("reap", "reap a dead session holding 100 streams (SessionStore.reap)",
           lambda: sessions.reap(dead), kind="write",
           items=lambda r, t: len(r[0]))
    # The seed's program: lease 20 s, each heartbeat moves the expiry and carries last_seq.
    b.each("seed_acquire", "the seed's acquire (lease 20 s, owner not in the condition)", s,
           seed.acquire)
    b.each("seed_heartbeat", "the seed's per-stream renewal (expiry moves, last_seq carried)",
           s, lambda c: seed.renew(c, 10))
    b.each("seed_release", "the seed's release: expiry 0, owner kept", s,
           lambda c: seed.release(c, 20))
    # Reads: the sweeper's scan over 1,000 sessions (copies of the live one as written).
    _fill_sessions(ddb, session, me.worker_id, 1000 - 1 - N)
    b.once("sweeper_scan", "Scan of 1,000 sessions (eventually consistent)",
           lambda: list(sessions.scan()), kind="read", items=lambda r, t: len(r))
    return {"ops": b.ops, "refused_write_reports": refused,
            "partiql_reports_capacity": any(b.partiql_reported)}


def _item(sessions: SessionStore, worker_id: str) -> SessionItem:
    item = sessions.get(worker_id)
    assert item is not None, worker_id
    return item


def _fill_sessions(ddb: Client, table: str, worker_id: str, n: int) -> None:
    raw = ddb.get_item(TableName=table, Key={SESSION.pk: {"S": session_pk_for(worker_id)}},
                       ConsistentRead=True)["Item"]
    workers = [f"w-{i:04d}-{'0' * 24}" for i in range(n)]
    for k in range(0, n, 25):
        ddb.batch_write_item(RequestItems={table: [
            {"PutRequest": {"Item": {**raw, SESSION.pk: {"S": session_pk_for(w)}}}}
            for w in workers[k:k + 25]]})


def _refused(b: _Bench, store: LeaseStore, released: Lease) -> Any:
    """What a checkpoint refused by its condition reports (its lease was released)."""
    with b.meter.measure() as tally, contextlib.suppress(LeaseLost):
        store.renew(released, 40, extend=False)
    return tally.of("write") or None


def run_local(out: Path | None = OUT) -> dict[str, Any]:
    """Start DynamoDB Local, measure, write ``out`` (if given); the result."""
    with LocalAws(backend="dynamodb-local") as aws:
        ddb = new_session().client(
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
        print(f"{name:24} {op['form']:30} {op['total']:>6} per {op['per']:4} {op['units']}"
              + (f" reads {op['reads']}" if op.get("reads") else ""))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
