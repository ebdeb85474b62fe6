"""Worker memory and CPU per connection: one worker process holding N streams (default 1,000).

Starts the local AWS (DynamoDB Local + moto SQS), the demo upstream in its own process (so its
memory is not counted), N STARTED items and one ``python -m worker``; nudges every stream, waits
until the worker holds them all, lets it settle, then reads the worker's RSS and CPU from /proc.

    .venv/bin/python bench/worker_density.py [--streams 1000] [--rate 1] [--compression]

Not part of the test suite: it takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3

from holdfast.core.table import create_stream
from holdfast.localaws import LocalAws

ROOT = Path(__file__).resolve().parents[1]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def held_by(ddb: object, table: str, owner: str) -> int:
    count, kwargs = 0, {"TableName": table}
    while True:
        resp = ddb.scan(**kwargs)  # type: ignore[attr-defined]
        count += sum(1 for i in resp["Items"] if i.get("lease_owner", {}).get("S") == owner)
        if "LastEvaluatedKey" not in resp:
            return count
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1.0, help="messages/s per stream")
    parser.add_argument("--compression", action="store_true")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds before measuring")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="holdfast-bench-"))
    with LocalAws(backend="dynamodb-local") as aws:
        env = aws.env()
        ddb = boto3.session.Session().client(
            "dynamodb", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"], region_name="us-east-1",
            aws_access_key_id="local", aws_secret_access_key="local")
        sqs = boto3.session.Session().client(
            "sqs", endpoint_url=env["AWS_ENDPOINT_URL_SQS"], region_name="us-east-1",
            aws_access_key_id="local", aws_secret_access_key="local")
        upstream = subprocess.Popen(
            [sys.executable, "-m", "holdfast.upstream", "--port", "0", "--rate",
             str(args.rate), *(["--compression"] if args.compression else [])],
            stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert upstream.stdout is not None
        port = int(upstream.stdout.readline().split(":")[2].split(" ")[0])
        worker_env = {**os.environ, **env, "HOLDFAST_WORKER_ID": "bench-worker",
                      "HOLDFAST_MAX_CONNECTIONS": str(args.streams), "HOLDFAST_HEALTH_PORT": "0",
                      "HOLDFAST_RECONCILE_SECONDS": "0", "HOLDFAST_METRICS_SECONDS": "3600",
                      "HOLDFAST_LOG_LEVEL": "WARNING",
                      "HOLDFAST_COMPRESSION": "true" if args.compression else "false"}
        log = (work / "worker.log").open("wb")
        worker = subprocess.Popen([sys.executable, "-m", "worker"], env=worker_env, cwd=ROOT,
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            conns = [f"bench-{i:05d}" for i in range(args.streams)]
            for c in conns:
                create_stream(ddb, env["HOLDFAST_TABLE"], c, f"ws://127.0.0.1:{port}/s/{c}")
            time.sleep(3)
            rss0 = rss_kb(worker.pid)
            t0 = time.monotonic()
            for i in range(0, len(conns), 10):
                sqs.send_message_batch(QueueUrl=env["HOLDFAST_QUEUE_URL"], Entries=[
                    {"Id": str(j), "MessageBody": json.dumps({"conn_id": c})}
                    for j, c in enumerate(conns[i:i + 10])])
            while (held := held_by(ddb, env["HOLDFAST_TABLE"], "bench-worker")) < args.streams:
                if time.monotonic() - t0 > 300:
                    raise RuntimeError(f"only {held} streams held after 300 s")
                time.sleep(1)
            claim_s = time.monotonic() - t0
            time.sleep(args.settle)
            c0, w0 = cpu_s(worker.pid), time.monotonic()
            time.sleep(10)
            cpu = (cpu_s(worker.pid) - c0) / (time.monotonic() - w0)
            rss1 = rss_kb(worker.pid)
        finally:
            worker.terminate()
            code = worker.wait(60)
            upstream.terminate()
            upstream.wait(10)
        per_conn = (rss1 - rss0) / args.streams
        print(json.dumps({
            "streams": args.streams, "rate_per_stream": args.rate,
            "compression": args.compression, "claim_all_s": round(claim_s, 2),
            "rss_idle_mb": round(rss0 / 1024, 1), "rss_loaded_mb": round(rss1 / 1024, 1),
            "rss_per_connection_kb": round(per_conn, 1), "cpu_cores": round(cpu, 3),
            "graceful_exit_code": code}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
