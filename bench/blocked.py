"""A handler that blocks its threads must not delay anything else (``--blocked-handler-only``).

One worker (bench timings). First, as a baseline, ``FREE`` streams are started, then stopped,
on the quiet worker. Then ``BLOCKERS`` streams whose handler holds a default-executor thread
for 20 s per message (``bench.blocking_handler``: more calls than the 6 threads of that
executor on 2 cores) are started and, while they block, ``FREE`` other streams are started and
then stopped again. Per stream: insert -> claimed and insert -> first message; stop -> released
(the worker's log lines). Throughout, the session item is read every 50 ms: the heartbeat
intervals (from the worker's own send times). The target (issue "Liveness"): no claim, release
or heartbeat delayed by more than 0.5 s against the quiet baseline.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

from bench.blocking_handler import BLOCK_PREFIX
from bench.harness import BenchFleet, dist, now_ms
from bench.scenarios import _retire
from bench.start_burst import _insert_at_once, first_logged
from holdfast.core.sessions import SessionItem, SessionStore
from holdfast.fleet.recorder import RECORD_WRAPS_ENV
from holdfast.fleet.timing import FleetTiming

__all__ = ["BLOCKED_TARGET_S", "blocked_handler", "blocked_handler_md"]

BLOCKERS = 8
FREE = 8
BLOCK_S = 20.0
BLOCKED_TARGET_S = 0.5


def _beats(bf: BenchFleet, stop: threading.Event, out: list[int]) -> None:
    """Every distinct heartbeat send time of the session, read every 50 ms until ``stop``."""
    store = SessionStore(bf.ddb, bf.session_table, "", ttl_ms=0, skew_ms=0)
    while not stop.wait(0.05):
        for item in store.scan():
            if isinstance(item, SessionItem) and item.heartbeat_at_ms not in out[-1:]:
                out.append(item.heartbeat_at_ms)


def _starts_and_stops(bf: BenchFleet, tag: str, timeout_s: float) -> dict[str, Any]:
    """``FREE`` streams started at once, then stopped at once: the three latencies."""
    ids = [f"{tag}-{i}" for i in range(FREE)]
    inserted = _insert_at_once(bf, ids)
    bf.wait(lambda: all(bf.handled.first_after(c, inserted[c]) for c in ids), timeout_s)
    log = bf.pf.fleet.run_dir / "worker-blocked-w0.log"
    claimed = first_logged(log.read_text(errors="replace").splitlines(), "claimed")
    first = {c: h[0] for c in ids if (h := bf.handled.first_after(c, inserted[c]))}
    stopped = now_ms()
    _retire(bf, ids)
    bf.wait(lambda: all(c in first_logged(log.read_text(errors="replace").splitlines(),
                                          "released") for c in ids), timeout_s)
    released = first_logged(log.read_text(errors="replace").splitlines(), "released")
    return {"claim_s": dist([(claimed[c] - inserted[c]) / 1000 for c in ids if c in claimed]),
            "first_message_s": dist([(first[c] - inserted[c]) / 1000 for c in ids
                                     if c in first]),
            "release_s": dist([(released[c] - stopped) / 1000 for c in ids
                               if released.get(c, 0) >= stopped]),
            "missing": FREE - len(first)}


def blocked_handler(run_dir: Path, say: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    """The quiet baseline and the same while ``BLOCKERS`` handlers block their threads."""
    timing = FleetTiming()
    bf = BenchFleet(run_dir, "ours", timing, name="blocked-handler",
                    worker_env={RECORD_WRAPS_ENV: "bench.blocking_handler:handle",
                                "HOLDFAST_BENCH_BLOCK_SECONDS": f"{BLOCK_S:g}"}).start()
    beats: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_beats, args=(bf, stop, beats), daemon=True)
    try:
        bf.worker("blocked-w0")
        # The router's and the worker's first calls (cold start) are not the baseline.
        warm = _insert_at_once(bf, ["warmup"])
        bf.wait(lambda: bf.handled.first_after("warmup", warm["warmup"]) is not None, timeout_s)
        _retire(bf, ["warmup"])
        watcher.start()
        say("blocked handler: baseline on a quiet worker")
        quiet = _starts_and_stops(bf, "quiet", timeout_s)
        quiet_beats = len(beats)
        blockers = [f"{BLOCK_PREFIX}{i}" for i in range(BLOCKERS)]
        blocked_from = time.monotonic()
        _insert_at_once(bf, blockers)
        time.sleep(2.0)  # claimed, connected, every handler call now holding a thread
        say(f"blocked handler: {BLOCKERS} handlers blocking their threads for {BLOCK_S:g} s")
        blocked = _starts_and_stops(bf, "free", timeout_s)
        # The heartbeats are watched for as long as the first calls block.
        time.sleep(max(0.0, blocked_from + BLOCK_S - time.monotonic()))
        _retire(bf, blockers)
    finally:
        stop.set()
        watcher.join(5)
        bf.close()
    gaps = [(b - a) / 1000 for a, b in itertools.pairwise(beats)]
    period_s = timing.heartbeat_s
    return {"blockers": BLOCKERS, "block_s": BLOCK_S, "free": FREE, "quiet": quiet,
            "blocked": blocked, "heartbeat_period_s": period_s,
            "heartbeat_interval_quiet_s": dist(gaps[:max(0, quiet_beats - 1)]),
            "heartbeat_interval_blocked_s": dist(gaps[quiet_beats:])}


def blocked_handler_md(bh: dict[str, Any]) -> list[str]:
    """The report's section: the quiet baseline against the same with blocked handlers."""
    from bench.report_production import _dist

    quiet, blocked = bh.get("quiet", {}), bh.get("blocked", {})
    rows = [(f"{bh.get('free')} streams: insert -> claimed", "claim_s"),
            ("insert -> first message", "first_message_s"), ("stop -> released", "release_s")]
    out = ["## A handler that blocks its threads", "",
           f"One worker; {bh.get('blockers')} streams whose handler holds a default-executor "
           f"thread for {bh.get('block_s'):g} s per message (`bench/blocked.py`), and "
           f"{bh.get('free')} other streams started and stopped, quiet and while they block. "
           "Seconds, p50 / p99 / max.", "",
           "| figure | quiet worker | handlers blocking their threads | delay (p99) |",
           "|---|---|---|---|"]
    delays = []
    for label, key in rows:
        q, b = quiet.get(key) or {}, blocked.get(key) or {}
        delay = (b["p99"] - q["p99"]) if b.get("p99") is not None and q.get(
            "p99") is not None else None
        delays.append(delay)
        out.append(f"| {label} | {_dist(q)} | {_dist(b)} | "
                   f"{'-' if delay is None else f'{delay:+.2f}'} |")
    hq = bh.get("heartbeat_interval_quiet_s") or {}
    hb = bh.get("heartbeat_interval_blocked_s") or {}
    hdelay = (hb["max"] - bh["heartbeat_period_s"]) if hb.get("max") is not None else None
    delays.append(hdelay)
    out.append(f"| heartbeat interval (period {bh.get('heartbeat_period_s'):g} s) | {_dist(hq)} | "
               f"{_dist(hb)} | {'-' if hdelay is None else f'{hdelay:+.2f} (max)'} |")
    met = all(d is not None and d <= BLOCKED_TARGET_S for d in delays)
    out += ["", f"Target: nothing delayed by more than {BLOCKED_TARGET_S:g} s: "
            f"**{'met' if met else 'NOT met'}**. Missing: {quiet.get('missing')} / "
            f"{blocked.get('missing')}.", ""]
    return out
