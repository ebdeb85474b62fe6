"""Density: one worker process holding N streams at a steady message rate; RSS per connection and
CPU per 1,000 connections, read from /proc. (Folded in from the former ``worker_density.py``.)

DynamoDB Local renews only a few hundred leases per second, so the heartbeat is sized to N (the
renewal CPU per lease is reported separately by ``renew_cost`` so it carries over to a real
table). The upstream runs in its own process so its memory is not counted.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3

from holdfast.core.table import create_stream
from holdfast.fleet.procs import REPO_ROOT
from holdfast.localaws import LocalAws

__all__ = ["cpu_s", "rss_kb", "run_density"]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _held_by(ddb: Any, table: str, owner: str) -> int:
    count, kwargs = 0, {"TableName": table, "ProjectionExpression": "lease_owner"}
    while True:
        resp = ddb.scan(**kwargs)
        count += sum(1 for i in resp["Items"] if i.get("lease_owner", {}).get("S") == owner)
        if "LastEvaluatedKey" not in resp:
            return count
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def run_density(n: int, *, heartbeat_s: float, lease_s: float, rate: float = 1.0,
                settle_s: float = 10.0, measure_s: float = 10.0, claim_timeout_s: float = 420,
                work: Path | None = None) -> dict[str, Any]:
    work = work or Path(f"/tmp/holdfast-density-{n}")
    work.mkdir(parents=True, exist_ok=True)
    with LocalAws(backend="dynamodb-local", workdir=work / "localaws") as aws:
        env = aws.env()
        session: Any = boto3.session.Session()
        kw = {"region_name": "us-east-1", "aws_access_key_id": "local",
              "aws_secret_access_key": "local"}
        ddb = session.client("dynamodb", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"], **kw)
        sqs = session.client("sqs", endpoint_url=env["AWS_ENDPOINT_URL_SQS"], **kw)
        upstream = subprocess.Popen(
            [sys.executable, "-m", "holdfast.upstream", "--port", "0", "--rate", str(rate)],
            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT, preexec_fn=_raise_fd_limit)  # noqa: PLW1509 - before threads matter
        assert upstream.stdout is not None
        port = int(upstream.stdout.readline().split(":")[2].split(" ")[0])
        worker_env = {**os.environ, **env, "HOLDFAST_WORKER_ID": "density",
                      "HOLDFAST_MAX_CONNECTIONS": str(n), "HOLDFAST_HEALTH_PORT": "0",
                      # The fallback sweep picks up nudges that went to the DLQ while the
                      # worker was busy claiming thousands (as in production).
                      "HOLDFAST_RECONCILE_SECONDS": "15", "HOLDFAST_METRICS_SECONDS": "3600",
                      "HOLDFAST_LOG_LEVEL": "WARNING", "HOLDFAST_LEASE_SECONDS": f"{lease_s:g}",
                      "HOLDFAST_HEARTBEAT_SECONDS": f"{heartbeat_s:g}",
                      "PYTHONPATH": str(REPO_ROOT)}
        log = (work / "worker.log").open("wb")
        worker = subprocess.Popen([sys.executable, "-m", "worker"], env=worker_env,
                                  cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                  preexec_fn=_raise_fd_limit)  # noqa: PLW1509
        try:
            conns = [f"d-{i:05d}" for i in range(n)]
            for c in conns:
                create_stream(ddb, env["HOLDFAST_TABLE"], c, f"ws://127.0.0.1:{port}/s/{c}")
            time.sleep(3)
            rss0 = rss_kb(worker.pid)
            t0 = time.monotonic()
            for i in range(0, n, 10):
                sqs.send_message_batch(QueueUrl=env["HOLDFAST_QUEUE_URL"], Entries=[
                    {"Id": str(j), "MessageBody": json.dumps({"conn_id": c})}
                    for j, c in enumerate(conns[i:i + 10])])
            while (held := _held_by(ddb, env["HOLDFAST_TABLE"], "density")) < n:
                if time.monotonic() - t0 > claim_timeout_s:
                    break  # measure what is held; the report says how many
                time.sleep(2)
            claim_s = time.monotonic() - t0
            time.sleep(settle_s)
            c0, w0 = cpu_s(worker.pid), time.monotonic()
            time.sleep(measure_s)
            cpu = (cpu_s(worker.pid) - c0) / (time.monotonic() - w0)
            rss1 = rss_kb(worker.pid)
            fds = len(os.listdir(f"/proc/{worker.pid}/fd"))
            held = _held_by(ddb, env["HOLDFAST_TABLE"], "density")
        finally:
            worker.terminate()
            code = worker.wait(120)
            upstream.terminate()
            upstream.wait(20)
    return {"streams": n, "held": held, "rate_per_stream": rate, "heartbeat_s": heartbeat_s,
            "lease_s": lease_s, "claim_all_s": round(claim_s, 1),
            "rss_idle_mb": round(rss0 / 1024, 1), "rss_loaded_mb": round(rss1 / 1024, 1),
            "rss_per_connection_kb": round((rss1 - rss0) / max(held, 1), 1),
            "cpu_cores": round(cpu, 3), "cpu_cores_per_1000": round(cpu * 1000 / max(held, 1), 3),
            "open_fds": fds, "graceful_exit_code": code}
