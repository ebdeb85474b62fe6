"""The benchmark fleet: ``ProxiedFleet`` (counting proxies, recorder) plus the measurements the
scenarios need: who handled what when (incrementally read), and the upstream connection log."""

from __future__ import annotations

import math
import signal
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.meter import Snapshot, snapshot
from holdfast.chaos.evidence import ConnSpan, load_conn_log
from holdfast.chaos.fleetctl import ProxiedFleet
from holdfast.core import names
from holdfast.core.table import create_stream
from holdfast.fleet.procs import Proc
from holdfast.fleet.timing import FleetTiming

__all__ = ["BASELINE_RECONCILE_S", "BenchFleet", "HandledLog", "dist", "now_ms"]

# The seed reconciles every 60 s with a 20 s lease; scaled like the lease (20 s -> 4 s): 12 s.
BASELINE_RECONCILE_S = 12.0


def now_ms() -> int:
    return time.time_ns() // 10**6


def dist(values: list[float]) -> dict[str, float | int | None]:
    """p50 / p99 / max (nearest-rank) of ``values`` and how many there were."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    v = sorted(values)

    def rank(p: float) -> float:
        return v[min(len(v) - 1, max(0, math.ceil(p * len(v) - 1e-9) - 1))]

    return {"n": len(v), "p50": round(statistics.median(v), 3), "p99": round(rank(0.99), 3),
            "max": round(v[-1], 3)}


@dataclass
class HandledLog:
    """Reads the recorder's ``*.seqs`` files incrementally: first/last handled per stream."""

    folder: Path
    offsets: dict[Path, int] = field(default_factory=dict)
    # (stream, worker) -> list of (wall_ms, seq)
    by: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)

    def poll(self) -> None:
        for path in sorted(self.folder.glob("*.seqs")):
            with path.open("rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1  # a torn last line is read next time
            self.offsets[path] = self.offsets.get(path, 0) + end
            for line in data[:end].decode(errors="replace").splitlines():
                parts = line.split()
                if len(parts) == 4 and parts[1].isdigit() and parts[3].isdigit():
                    self.by.setdefault((parts[0], parts[2]), []).append(
                        (int(parts[3]), int(parts[1])))

    def first_after(self, stream: str, t_ms: int, worker: str | None = None,
                    not_worker: str | None = None) -> tuple[int, int] | None:
        """(wall ms, seq) of the first message of ``stream`` handled at or after ``t_ms``."""
        best: tuple[int, int] | None = None
        for (s, w), recs in self.by.items():
            if s != stream or (worker and w != worker) or (not_worker and w == not_worker):
                continue
            for rec in recs:
                if rec[0] >= t_ms and (best is None or rec < best):
                    best = rec
        return best

    def last_of(self, stream: str, worker: str) -> tuple[int, int] | None:
        recs = self.by.get((stream, worker))
        return max(recs, key=lambda r: r[1]) if recs else None

    def seqs(self, stream: str) -> list[int]:
        return [seq for (s, _), recs in self.by.items() if s == stream for _, seq in recs]


class BenchFleet:
    """One mode's fleet: "ours" (our workers and the runner) or "baseline" (the seed's own
    program, ``bench.seed_worker``, with no runner). Every DynamoDB call of the workers and the
    runner goes through a counting proxy that also adds up the consumed capacity; with
    ``proxied=False`` straight to the backend (``ProxiedFleet``), and nothing is metered.
    ``worker_env`` / ``runner_env`` override the timing's variables."""

    def __init__(self, run_dir: Path, mode: str, timing: FleetTiming, *,
                 worker_env: dict[str, str] | None = None,
                 runner_env: dict[str, str] | None = None, name: str | None = None,
                 proxied: bool = True) -> None:
        self.mode = mode
        extra = {"HOLDFAST_LOG_LEVEL": "INFO"}  # "worker started" is an INFO line
        if mode == "baseline":
            extra[names.ENV_RECONCILE_SECONDS] = f"{BASELINE_RECONCILE_S:g}"
        extra.update(worker_env or {})
        self.pf = ProxiedFleet(run_dir / (name or mode), timing, with_runner=mode == "ours",
                               worker_env=extra, runner_env=runner_env, capacity=True,
                               proxied=proxied)
        self.timing = timing
        self.handled = HandledLog(self.pf.fleet.record_dir)

    def start(self) -> BenchFleet:
        self.pf.start()
        self.ddb = self.pf.client("dynamodb")
        return self

    def close(self) -> list[str]:
        return self.pf.close()

    @property
    def session_table(self) -> str:
        return self.pf.direct_env.get("HOLDFAST_SESSION_TABLE", f"{self.pf.table}-sessions")

    def meter(self) -> Snapshot:
        """The proxies' counters and the router invocations so far (see ``bench.meter``)."""
        pf = self.pf
        if not pf.proxied:
            raise RuntimeError("this fleet runs without proxies: nothing is metered")
        proxies = {"worker_dynamodb": pf.ddb_proxy, "worker_sqs": pf.sqs_proxy}
        if pf.runner_proxies:
            proxies.update(runner_dynamodb=pf.runner_proxies[0],
                           runner_sqs=pf.runner_proxies[1])
        return snapshot(proxies, pf.fleet.run_dir / "runner.log" if pf.with_runner else None)

    def worker(self, wid: str) -> Proc:
        proc = self._start_seed(wid) if self.mode == "baseline" else self.pf.start_worker(wid)
        self.wait_started(proc)
        return proc

    def _start_seed(self, wid: str) -> Proc:
        """The seed's worker (``bench.seed_worker``) with the environment ``ProxiedFleet``
        gives ours: its DynamoDB calls go through the same counting proxy."""
        return self.pf.start_worker(wid, module="bench.seed_worker")

    def wait_started(self, proc: Proc, timeout_s: float = 30) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            try:
                if b'"worker started"' in proc.log_path.read_bytes():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"worker {proc.name} did not start: {proc.tail()}")

    def create(self, ids: list[str], spacing_s: float = 0.0) -> dict[str, int]:
        """Insert STARTED items; the wall ms of each insert."""
        out = {}
        for cid in ids:
            out[cid] = now_ms()
            create_stream(self.ddb, self.pf.table, cid, f"{self.pf.base_url}/s/{cid}")
            if spacing_s:
                time.sleep(spacing_s)
        return out

    def wait(self, pred: Any, timeout_s: float, poll_s: float = 0.1) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.handled.poll()
            if pred():
                return True
            time.sleep(poll_s)
        self.handled.poll()
        return bool(pred())

    def conns(self) -> list[ConnSpan]:
        return load_conn_log(self.pf.fleet.conn_log)

    def kill(self, proc: Proc, sig: signal.Signals) -> int:
        proc.expected_exit = True
        t = now_ms()
        proc.signal(sig)
        return t
