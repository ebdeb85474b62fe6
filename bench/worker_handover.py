"""Graceful handover and crash failover times of real worker processes.

1. Worker A holds N streams; worker B is idle. SIGTERM A: A drains and releases, a stand-in for
   the router nudges each released stream (polling the table every 50 ms: the real router reads
   DynamoDB Streams, ~10 ms behind locally), B claims and reconnects. Measured: SIGTERM -> B's
   upstream connection open, per stream (from the upstream's connection log).
2. B now holds all; worker C is idle with a reconcile sweep every ``--sweep`` seconds. SIGKILL
   B: nothing is written, so the leases must expire (lease + skew) before C's sweep may take
   them. Measured: SIGKILL -> C's connection open, per stream.

It also checks that no stream ever had two upstream connections open at once.

    .venv/bin/python bench/worker_handover.py [--streams 100] [--lease 20] [--heartbeat 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import boto3

from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws

ROOT = Path(__file__).resolve().parents[1]


def client(env: dict[str, str], service: str) -> Any:
    url = env["AWS_ENDPOINT_URL_SQS" if service == "sqs" else "AWS_ENDPOINT_URL_DYNAMODB"]
    return boto3.session.Session().client(service, endpoint_url=url, region_name="us-east-1",
                                          aws_access_key_id="local", aws_secret_access_key="local")


def router_stand_in(env: dict[str, str], stop: threading.Event) -> None:
    ddb, sqs, sent = client(env, "dynamodb"), client(env, "sqs"), set()
    while not stop.wait(0.05):
        todo = []
        for raw in ddb.scan(TableName=env["HOLDFAST_TABLE"])["Items"]:
            key = (raw["Pk"]["S"], raw.get("updated_at_ms", {}).get("N"))
            if "lease_owner" not in raw and raw["lease_expires_at_ms"]["N"] == "0" \
                    and key not in sent:
                sent.add(key)
                todo.append(raw["Pk"]["S"].removeprefix("CONN#"))
        for i in range(0, len(todo), 10):  # the router sends batches of 10 too
            sqs.send_message_batch(QueueUrl=env["HOLDFAST_QUEUE_URL"], Entries=[
                {"Id": str(j), "MessageBody": json.dumps({"conn_id": c, "reason": "released"})}
                for j, c in enumerate(todo[i:i + 10])])


def opens(conn_log: Path, worker: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in conn_log.read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "open" and e["worker"] == worker:
            out.setdefault(e["stream_id"], e["opened_wall_ms"])
    return out


def overlaps(conn_log: Path) -> int:
    spans: dict[str, list[tuple[int, int]]] = {}
    for line in conn_log.read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "close":
            spans.setdefault(e["stream_id"], []).append((e["opened_ns"], e["closed_ns"]))
    bad = 0
    for s in spans.values():
        s.sort()
        bad += sum(1 for a, b in itertools.pairwise(s) if b[0] < a[1])
    return bad


def wait_all(conn_log: Path, worker: str, n: int, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = opens(conn_log, worker)
        if len(got) >= n:
            return got
        time.sleep(0.1)
    raise RuntimeError(f"{worker} opened only {len(opens(conn_log, worker))}/{n} streams")


def summary(t0_ms: float, got: dict[str, int]) -> dict[str, float]:
    d = sorted((v - t0_ms) / 1000 for v in got.values())
    return {"p50_s": round(statistics.median(d), 3), "max_s": round(d[-1], 3),
            "min_s": round(d[0], 3)}


def scenario(args: argparse.Namespace, env: dict[str, str], port: int, conn_log: Path, *,
             worker: Any, stop: threading.Event) -> dict[str, object]:
    """A holds all; SIGTERM A (B takes over); C idle; SIGKILL B (C's sweep takes over)."""
    ddb, sqs = client(env, "dynamodb"), client(env, "sqs")
    conns = [f"ho-{i:04d}" for i in range(args.streams)]
    for c in conns:
        create_stream(ddb, env["HOLDFAST_TABLE"], c, f"ws://127.0.0.1:{port}/s/{c}")
    a = worker("A")
    time.sleep(2)
    for i in range(0, len(conns), 10):
        sqs.send_message_batch(QueueUrl=env["HOLDFAST_QUEUE_URL"], Entries=[
            {"Id": str(j), "MessageBody": json.dumps({"conn_id": c})}
            for j, c in enumerate(conns[i:i + 10])])
    wait_all(conn_log, "A", len(conns), 300)
    b = worker("B")
    threading.Thread(target=router_stand_in, args=(env, stop), daemon=True).start()
    time.sleep(3)
    t0 = time.time() * 1000
    a.send_signal(signal.SIGTERM)
    graceful = summary(t0, wait_all(conn_log, "B", len(conns), 120))
    a_exit = a.wait(60)
    worker("C", HOLDFAST_RECONCILE_SECONDS=args.sweep)
    time.sleep(float(args.heartbeat) + 2)
    t1 = time.time() * 1000
    b.send_signal(signal.SIGKILL)
    crash = summary(t1, wait_all(conn_log, "C", len(conns), 300))
    return {"graceful_handover": graceful, "graceful_exit_code": a_exit,
            "crash_failover": crash}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--lease", default="20")
    p.add_argument("--heartbeat", default="5")
    p.add_argument("--sweep", default="2", help="reconcile period of the surviving worker (s)")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="holdfast-handover-"))
    conn_log = work / "conns.jsonl"
    with LocalAws(backend="dynamodb-local") as aws:
        env = aws.env()
        up = subprocess.Popen([sys.executable, "-m", "holdfast.upstream", "--port",
                               "0", "--rate", "10", "--conn-log", str(conn_log)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert up.stdout is not None
        port = int(up.stdout.readline().split(":")[2].split(" ")[0])
        base = {**os.environ, **env, "HOLDFAST_LEASE_SECONDS": args.lease,
                "HOLDFAST_HEARTBEAT_SECONDS": args.heartbeat, "HOLDFAST_HEALTH_PORT": "0",
                "HOLDFAST_RECONCILE_SECONDS": "0", "HOLDFAST_LOG_LEVEL": args.log_level,
                "HOLDFAST_POLL_SECONDS": "20"}
        procs: list[subprocess.Popen[bytes]] = []

        def worker(name: str, **extra: str) -> subprocess.Popen[bytes]:
            log = (work / f"{name}.log").open("wb")
            proc = subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, stdout=log,
                                    stderr=subprocess.STDOUT,
                                    env={**base, "HOLDFAST_WORKER_ID": name, **extra})
            procs.append(proc)
            return proc

        stop = threading.Event()
        try:
            result = scenario(args, env, port, conn_log, worker=worker, stop=stop)
        finally:
            stop.set()
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(60)
            up.terminate()
            up.wait(10)
        print(json.dumps({"logs": str(work), "streams": args.streams, "lease_s": args.lease,
                          "heartbeat_s": args.heartbeat, "sweep_s": args.sweep, **result,
                          "overlapping_connections": overlaps(conn_log)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
