"""Start latency of a burst: N streams inserted at once into 3 workers (``--start-burst-only``).

On the bench's local fleet (DynamoDB Local, moto SQS, the local runner, 3 of our workers), after
one warm-up stream (the router's cold start), ``N`` STARTED items are written at once from a
thread pool: first on the fresh fleet (a cold DynamoDB Local: the ``30_cold`` row), then, after
``WARM_BURSTS`` bursts not measured, for the figures. Per stream: insert -> first
message handled (the figure, p50 / p99 / max), split at the router's ``router decision ...
INSERT`` line and at the first worker's ``claimed`` line (insert -> routed -> claimed -> first
message), so a slow figure says whether the time went before the nudge or after it.
``bursts`` are the distinct moments the router received the inserts and ``max_gap_s`` the
longest pause between them: the runner's reading cadence as the router saw it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.harness import BenchFleet, dist, now_ms
from bench.scenarios import _retire
from holdfast.core.table import create_stream
from holdfast.fleet.timing import FleetTiming

__all__ = ["BEHIND_KEY", "BURST_SIZES", "BURST_TARGETS_S", "COLD_KEY", "bursts", "first_logged",
           "router_arrivals", "start_burst", "verdicts"]

BURST_SIZES = (30, 300)
BURST_TARGETS_S = {30: 0.5, 300: 1.0}  # issue 19: start latency p99, 3 workers, loaded 2 cores
WORKERS = 3
INSERT_THREADS = 16
QUIET_S = 3.0
BEHIND_STOPS = 100
BEHIND_KEY = "30_behind_stops"
COLD_KEY = "30_cold"
# DynamoDB Local is a JVM started for the run: its first few hundred writes run before the
# JIT has compiled them (acquires of a fresh fleet's first two 30-bursts took 324 and 366 ms
# p50, the third and fourth 119 and 142 ms). So the bursts are measured after two more bursts of 30
# through the fleet, not measured, and the first one is its own row. A synthetic warm-up
# (600 insert/claim/release cycles on a scratch table) was tried: the 30 burst as fast, but
# the 300 burst's p99 was above 4 s in six of ten runs, 4.1-9.3 s in the four alternating with
# runs without it (1.47 and 1.58 s); not kept.
WARM_BURSTS = 2
BURST_CLUSTER_MS = 100  # router lines closer than this are one delivery
_TS = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)[,.](\d{3})\d*([+-]\d{2}:?\d{2}|Z)?")


def _ms(stamp: str) -> int | None:
    m = _TS.search(stamp)
    if not m:
        return None
    zone = (m.group(3) or "+0000").replace("Z", "+0000").replace(":", "")
    t = dt.datetime.strptime(f"{m.group(1).replace('T', ' ')} {zone}", "%Y-%m-%d %H:%M:%S %z")
    return int(t.timestamp()) * 1000 + int(m.group(2))


def first_logged(lines: Iterable[str], message: str,
                 event_name: str | None = None) -> dict[str, int]:
    """conn id -> wall ms of its first JSON log line saying ``message`` (and ``event_name``)."""
    out: dict[str, int] = {}
    needle = f'"message":"{message}"'
    for line in lines:
        if needle not in line.replace('": "', '":"'):
            continue
        try:
            rec = json.loads(line[line.index("{"):])
        except ValueError:
            continue
        conn, ms = rec.get("conn_id"), _ms(str(rec.get("timestamp", "")))
        if (isinstance(conn, str) and ms is not None
                and (event_name is None or rec.get("event_name") == event_name)):
            out.setdefault(conn, ms)
    return out


def router_arrivals(lines: Iterable[str]) -> dict[str, int]:
    """conn id -> wall ms of the router's first decision on its INSERT (runner log lines)."""
    return first_logged(lines, "router decision", "INSERT")


def bursts(arrivals_ms: Iterable[int], cluster_ms: int = BURST_CLUSTER_MS) -> list[int]:
    """Start (ms) of each delivery: arrivals less than ``cluster_ms`` after the previous one
    belong to the same delivery."""
    out: list[int] = []
    last: int | None = None
    for t in sorted(arrivals_ms):
        if last is None or t - last >= cluster_ms:
            out.append(t)
        last = t
    return out


def verdicts(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) per burst size measured."""
    rows = []
    for n, limit in BURST_TARGETS_S.items():
        p99 = result.get(str(n), {}).get("latency_s", {}).get("p99")
        rows.append((f"start p99 <= {limit:g} s, {n} inserted at once into {WORKERS} workers",
                     f"{p99}", "not measured" if p99 is None else
                     ("met" if p99 <= limit else "NOT met")))
    return rows


def _insert_at_once(bf: BenchFleet, ids: list[str]) -> dict[str, int]:
    def one(cid: str) -> tuple[str, int]:
        t = now_ms()
        create_stream(bf.ddb, bf.pf.table, cid, f"{bf.pf.base_url}/s/{cid}")
        return cid, t

    with ThreadPoolExecutor(min(INSERT_THREADS, len(ids))) as pool:
        return dict(pool.map(one, ids))


def _behind_stops(bf: BenchFleet, n: int, stops: int, timeout_s: float) -> dict[str, Any]:
    """``n`` inserted at once right after ``stops`` held streams were stopped: the router is
    busy with their stop orders (the slow run of issue 19 came after a handover's retire)."""
    held = [f"held{stops}-{i:03d}" for i in range(stops)]
    t0 = now_ms()
    _insert_at_once(bf, held)
    bf.wait(lambda: all(bf.handled.first_after(c, t0) for c in held), timeout_s, poll_s=0.25)
    time.sleep(QUIET_S)
    _retire(bf, held)
    return {**_one_burst(bf, n, timeout_s, tag=f"behind{stops}-"), "behind_stops": stops}


def _one_burst(bf: BenchFleet, n: int, timeout_s: float, tag: str = "") -> dict[str, Any]:
    ids = [f"burst{tag}{n}-{i:03d}" for i in range(n)]
    inserted = _insert_at_once(bf, ids)
    bf.wait(lambda: all(bf.handled.first_after(c, inserted[c]) for c in ids), timeout_s,
            poll_s=0.25)
    first = {c: h[0] for c in ids if (h := bf.handled.first_after(c, inserted[c]))}
    run_dir = bf.pf.fleet.run_dir
    routed = router_arrivals((run_dir / "runner.log").read_text(errors="replace").splitlines())
    claimed: dict[str, int] = {}
    for path in sorted(run_dir.glob("worker-*.log")):
        for c, ms in first_logged(path.read_text(errors="replace").splitlines(),
                                  "claimed").items():
            claimed[c] = min(ms, claimed.get(c, ms))  # the first claim by any worker
    lat = [(first[c] - inserted[c]) / 1000 for c in ids if c in first]
    to_router = [(routed[c] - inserted[c]) / 1000 for c in ids if c in routed]
    after = [(first[c] - routed[c]) / 1000 for c in ids if c in routed and c in first]
    to_claim = [(claimed[c] - routed[c]) / 1000 for c in ids if c in routed and c in claimed]
    claim_to_first = [(h[0] - claimed[c]) / 1000 for c in ids if c in claimed
                      and (h := bf.handled.first_after(c, claimed[c]))]
    starts = bursts(routed[c] for c in ids if c in routed)
    _retire(bf, ids)
    return {"streams": n, "latency_s": dist(lat), "insert_to_router_s": dist(to_router),
            "router_to_handled_s": dist(after), "router_to_claimed_s": dist(to_claim),
            "claimed_to_handled_s": dist(claim_to_first),
            "bursts": len(starts),
            "max_gap_s": max((b - a for a, b in itertools.pairwise(starts)), default=0) / 1000,
            "insert_spread_s": (max(inserted.values()) - min(inserted.values())) / 1000,
            "missing": n - len(lat), "samples": lat}


def start_burst(run_dir: Path, say: Any, sizes: Iterable[int] = BURST_SIZES, *,
                timeout_s: float = 60.0, behind_stops: int = BEHIND_STOPS,
                warm_bursts: int = WARM_BURSTS) -> dict[str, Any]:
    """The first size on the fresh fleet (``COLD_KEY``), then, after ``warm_bursts`` more
    of it (not measured: DynamoDB Local's JIT), each size in turn on one fleet of 3 workers
    at production defaults, then the first size again right after ``behind_stops`` streams
    were stopped; figures by size.

    Production defaults, not the bench's 2 s checkpoints: 300 new streams checkpointing every
    2 s are 150 writes a second more than users' fleets make, and on 2 shared cores that load
    on DynamoDB Local, not the start path, set the figure."""
    sizes_list = list(sizes)
    timing = FleetTiming.production()
    bf = BenchFleet(run_dir, "ours", timing, name="start-burst").start()
    out: dict[str, Any] = {"workers": WORKERS, "timing": {
        "lease_s": timing.lease_s, "heartbeat_s": timing.heartbeat_s,
        "checkpoint_s": timing.checkpoint_s}}
    try:
        for i in range(WORKERS):
            bf.worker(f"burst-w{i}")
        warm = _insert_at_once(bf, ["burst-warmup"])
        bf.wait(lambda: bf.handled.first_after("burst-warmup", warm["burst-warmup"]) is not None,
                timeout_s)
        _retire(bf, ["burst-warmup"])
        if warm_bursts:
            time.sleep(QUIET_S)
            say(f"start burst: {sizes_list[0]} inserted at once on a cold emulator")
            r = out[COLD_KEY] = _one_burst(bf, sizes_list[0], timeout_s, tag="cold-")
            say(f"start burst cold: {r['latency_s']}, to router {r['insert_to_router_s']}")
            for i in range(warm_bursts):
                time.sleep(QUIET_S)
                _one_burst(bf, sizes_list[0], timeout_s, tag=f"warm{i}-")
            out["warm_bursts"] = warm_bursts
            say(f"start burst: {warm_bursts} bursts of {sizes_list[0]} to warm up, not measured")
        for n in sizes_list:
            time.sleep(QUIET_S)  # the previous step's stop orders and claims settle first
            say(f"start burst: {n} streams inserted at once")
            out[str(n)] = _one_burst(bf, n, timeout_s)
            r = out[str(n)]
            say(f"start burst {n}: {r['latency_s']}, to router {r['insert_to_router_s']}, "
                f"{r['bursts']} deliveries, max gap {r['max_gap_s']} s")
        if behind_stops:
            time.sleep(QUIET_S)
            say(f"start burst: {sizes_list[0]} inserted right after {behind_stops} stops")
            r = out[BEHIND_KEY] = _behind_stops(bf, sizes_list[0], behind_stops, timeout_s)
            say(f"start burst behind stops: {r['latency_s']}, to router "
                f"{r['insert_to_router_s']}, max gap {r['max_gap_s']} s")
    finally:
        bf.close()
        runner_log = bf.pf.fleet.run_dir / "runner.log"
        if runner_log.exists():
            stopped = [ln for ln in runner_log.read_text(errors="replace").splitlines()
                       if "runner stopped" in ln]
            out["runner_summary"] = stopped[-1][-400:] if stopped else None
    return out
