"""The measured scenarios, each on a ``BenchFleet``; every figure is a list of per-stream
samples (seconds) summarised by ``dist`` (p50 / p99 / max)."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from bench.harness import BenchFleet, dist, now_ms
from bench.meter import window
from holdfast.core.schema import STOPPED
from holdfast.core.table import set_desired_state
from holdfast.fleet.procs import Proc

__all__ = ["handover", "loss", "start_latency", "steady_cost", "stop_latency"]


def loss(bf: BenchFleet, ids: Iterable[str]) -> tuple[int, int]:
    """(seqs missing between the first and last handled, seqs handled more than once) of
    ``ids``, from the handled records."""
    gap = dups = 0
    for c in ids:
        seqs = bf.handled.seqs(c)
        uniq = set(seqs)
        dups += len(seqs) - len(uniq)
        if uniq:
            gap += sum(1 for s in range(min(uniq), max(uniq) + 1) if s not in uniq)
    return gap, dups


def _retire(bf: BenchFleet, ids: list[str]) -> None:
    """Stop a scenario's streams so the next scenario starts from a quiet table."""
    for cid in ids:
        set_desired_state(bf.ddb, bf.pf.table, cid, STOPPED)


def start_latency(bf: BenchFleet, n: int, spacing_s: float, timeout_s: float) -> dict[str, Any]:
    """Item inserted -> first message handled, for ``n`` streams inserted ``spacing_s`` apart."""
    ids = [f"{bf.mode}-start-{i:03d}" for i in range(n)]
    inserted = bf.create(ids, spacing_s)
    bf.wait(lambda: all(bf.handled.first_after(c, inserted[c]) for c in ids), timeout_s)
    lat = [(h[0] - inserted[c]) / 1000 for c in ids if (h := bf.handled.first_after(
        c, inserted[c]))]
    _retire(bf, ids)
    return {"latency_s": dist(lat), "samples": lat, "missing": n - len(lat)}


def handover(bf: BenchFleet, n: int, sig: signal.Signals, *, rounds: int, timeout_s: float,
             tag: str, on_kill: Callable[[Proc], None] | None = None) -> dict[str, Any]:
    """A worker holding ``n`` streams gets ``sig``; another worker resumes them. Per stream:
    signal -> first message handled by the new holder; the seq gap (seqs never handled between
    the first and last handled) and duplicates. ``on_kill(holder)`` runs right after the
    signal (the platform's report of a crash)."""
    ids = [f"{bf.mode}-{tag}-{i:03d}" for i in range(n)]
    holder = bf.worker(f"{bf.mode}-{tag}-h0")
    t_ins = now_ms()
    bf.create(ids)
    if not bf.wait(lambda: all(bf.handled.first_after(c, t_ins, worker=holder.name)
                               for c in ids), timeout_s):
        raise RuntimeError(f"{holder.name} did not take all {n} streams")
    lat: list[float] = []
    for r in range(rounds):
        nxt = bf.worker(f"{bf.mode}-{tag}-h{r + 1}")
        time.sleep(bf.timing.heartbeat_s * 2)  # a checkpoint or two, messages flowing
        t0 = bf.kill(holder, sig)
        if on_kill is not None:
            on_kill(holder)

        def resumed(t0: int = t0, name: str = nxt.name) -> bool:
            return all(bf.handled.first_after(c, t0, worker=name) for c in ids)

        ok = bf.wait(resumed, timeout_s)
        for c in ids:
            h = bf.handled.first_after(c, t0, worker=nxt.name)
            if h:
                lat.append((h[0] - t0) / 1000)
        holder.stop(bf.timing.shutdown_s + 5)
        holder = nxt
        if not ok:
            break
    time.sleep(1)
    bf.handled.poll()
    gap, dups = loss(bf, ids)
    _retire(bf, ids)
    time.sleep(bf.timing.heartbeat_s + 1)
    holder.stop(bf.timing.shutdown_s + 5)
    return {"streams": n, "rounds": rounds, "latency_s": dist(lat), "samples": lat,
            "expected_samples": n * rounds, "seq_gap": gap, "duplicates": dups,
            "lease_ratio_max": round(max(lat) / bf.timing.lease_s, 3) if lat else None}


def stop_latency(bf: BenchFleet, n: int, timeout_s: float) -> dict[str, Any]:
    """STOPPED written -> every upstream connection of the stream closed."""
    ids = [f"{bf.mode}-stop-{i:03d}" for i in range(n)]
    t_ins = now_ms()
    bf.create(ids)
    bf.wait(lambda: all(bf.handled.first_after(c, t_ins) for c in ids), timeout_s)
    time.sleep(bf.timing.heartbeat_s)
    rng = random.Random(5)
    stopped: dict[str, int] = {}
    for c in ids:
        stopped[c] = now_ms()
        set_desired_state(bf.ddb, bf.pf.table, c, STOPPED)
        time.sleep(rng.uniform(0.1, 0.5))  # random phase against the heartbeat

    def closed(c: str) -> int | None:
        spans = [s for s in bf.conns() if s.stream == c and s.open_ms < stopped[c]]
        if not spans or any(s.close_ms is None for s in spans):
            return None
        return max(s.close_ms or 0 for s in spans)

    bf.wait(lambda: all(closed(c) for c in ids), timeout_s, poll_s=0.2)
    lat = [((cl or 0) - stopped[c]) / 1000 for c in ids if (cl := closed(c))]
    return {"latency_s": dist(lat), "samples": lat, "missing": n - len(lat)}


def steady_cost(bf: BenchFleet, n: int, seconds: float, timeout_s: float) -> dict[str, Any]:
    """Calls, items and consumed units per connection-hour while ``n`` streams are held
    steadily by 2 workers (see ``bench.meter.window``)."""
    ids = [f"{bf.mode}-cost-{i:03d}" for i in range(n)]
    t_ins = now_ms()
    bf.create(ids)
    bf.wait(lambda: all(bf.handled.first_after(c, t_ins) for c in ids), timeout_s)
    time.sleep(bf.timing.heartbeat_s * 2)
    before = bf.meter()
    t0 = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - t0
    w = window(before, bf.meter(), streams=n, workers=2, seconds=took, lease=bf.pf.table,
               session=bf.session_table)
    _retire(bf, ids)
    # The older report's shape: party -> op -> calls/items at the top level.
    return {"streams": n, "seconds": w["seconds"], "heartbeat_s": bf.timing.heartbeat_s,
            **w["calls"], "metered": w}
