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

from holdfast.core.boto import new_session
from holdfast.core.schema import ATTR
from holdfast.core.table import create_stream
from holdfast.fleet.procs import REPO_ROOT
from holdfast.localaws import LocalAws

__all__ = ["checkpoint_progress", "cpu_s", "rss_kb", "run_density"]


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
    """Streams held by worker ``owner``: its lease owner is the worker id (the seed's lease
    liveness) or its session, ``<worker id>#<incarnation>``."""
    count, kwargs = 0, {"TableName": table, "ProjectionExpression": "lease_owner"}
    while True:
        resp = ddb.scan(**kwargs)
        count += sum(1 for i in resp["Items"]
                     if (o := i.get("lease_owner", {}).get("S", "")) == owner
                     or o.startswith(f"{owner}#"))
        if "LastEvaluatedKey" not in resp:
            return count
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _checkpoints(ddb: Any, table: str) -> dict[str, int]:
    """conn_id -> stored ``last_seq`` of every stream that has one."""
    out: dict[str, int] = {}
    kwargs = {"TableName": table, "ProjectionExpression": "#k, #s",
              "ExpressionAttributeNames": {"#k": ATTR.pk, "#s": ATTR.last_seq}}
    while True:
        resp = ddb.scan(**kwargs)
        for item in resp["Items"]:
            if "N" in item.get(ATTR.last_seq, {}) and "S" in item.get(ATTR.pk, {}):
                out[item[ATTR.pk]["S"]] = int(item[ATTR.last_seq]["N"])
        if "LastEvaluatedKey" not in resp:
            return out
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _cpu_window(pid: int, seconds: float, sample_s: float | None) -> tuple[float, list[float]]:
    """The process's CPU cores over ``seconds``; with ``sample_s`` also its CPU seconds at
    every sample (a time series, for bursts)."""
    c0, w0 = cpu_s(pid), time.monotonic()
    series = [c0]
    while sample_s and time.monotonic() - w0 < seconds - 1e-3:
        time.sleep(max(0.0, min(sample_s, seconds - (time.monotonic() - w0))))
        series.append(cpu_s(pid))
    if not sample_s:
        time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - w0), series


def run_density(n: int, *, heartbeat_s: float, lease_s: float, rate: float = 1.0,
                settle_s: float = 10.0, measure_s: float = 10.0, claim_timeout_s: float = 420,
                work: Path | None = None, checkpoint_s: float | None = None,
                sample_s: float | None = None, track_checkpoints: bool = False
                ) -> dict[str, Any]:
    """One worker holding ``n`` streams. ``checkpoint_s`` sets HOLDFAST_CHECKPOINT_SECONDS
    (unset: the worker's default); ``sample_s`` adds a CPU time series of the window;
    ``track_checkpoints`` reads every stored checkpoint before and after the window and the
    worker's slow-checkpoint warnings in it (did the checkpoints keep up?)."""
    work = work or Path(f"/tmp/holdfast-density-{n}")
    work.mkdir(parents=True, exist_ok=True)
    with LocalAws(backend="dynamodb-local", workdir=work / "localaws") as aws:
        env = aws.env()
        session: Any = new_session()
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
                      "PYTHONPATH": str(REPO_ROOT),
                      **({"HOLDFAST_CHECKPOINT_SECONDS": f"{checkpoint_s:g}"}
                         if checkpoint_s is not None else {})}
        log = (work / "worker.log").open("wb")
        worker = subprocess.Popen([sys.executable, "-m", "holdfast.worker"], env=worker_env,
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
            extra: dict[str, Any] = {}
            if track_checkpoints:
                seq0, s0, log0 = (_checkpoints(ddb, env["HOLDFAST_TABLE"]), time.monotonic(),
                                  (work / "worker.log").stat().st_size)
            cpu, series = _cpu_window(worker.pid, measure_s, sample_s)
            if sample_s:
                extra["cpu_series_s"] = [round(c - series[0], 3) for c in series]
                extra["sample_s"] = sample_s
            if track_checkpoints:
                extra["checkpoints"] = checkpoint_progress(
                    seq0, _checkpoints(ddb, env["HOLDFAST_TABLE"]), time.monotonic() - s0,
                    (work / "worker.log").read_bytes()[log0:], rate)
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
            "open_fds": fds, "graceful_exit_code": code, "measure_s": measure_s,
            **({"checkpoint_s": checkpoint_s} if checkpoint_s is not None else {}), **extra}


def checkpoint_progress(before: dict[str, int], after: dict[str, int], seconds: float,
                        log: bytes, rate: float) -> dict[str, Any]:
    """How the stored checkpoints moved over ``seconds`` (each stream's seq moves ``rate``
    per second), and the worker's "slow heartbeat" warnings in ``log`` (a checkpoint cycle
    that took longer than the heartbeat; ``took_ms`` is how long)."""
    moved = [after[c] - before[c] for c in before if c in after]
    took: dict[str, list[int]] = {"cycle": [], "session": []}
    session_errors = 0
    for line in log.decode(errors="replace").splitlines():
        try:
            rec = json.loads(line)
            msg = str(rec.get("message", ""))
            if msg.startswith("slow heartbeat"):
                took["cycle"].append(int(rec.get("took_ms", 0)))
            elif msg.startswith("slow session heartbeat"):
                took["session"].append(int(rec.get("took_ms", 0)))
            session_errors += msg.startswith(("session fenced", "session lost",
                                              "session heartbeat failed"))
        except (ValueError, AttributeError, TypeError):
            continue
    advanced = sum(1 for m in moved if m > 0)
    return {"streams_read": len(moved), "advanced": advanced, "seconds": round(seconds, 1),
            "mean_advance_per_s": round(sum(moved) / len(moved) / seconds, 3) if moved else None,
            "expected_advance_per_s": rate, "slow_cycles": len(took["cycle"]),
            "slowest_cycle_ms": max(took["cycle"], default=None),
            "slow_session_heartbeats": len(took["session"]),
            "slowest_session_heartbeat_ms": max(took["session"], default=None),
            "session_errors": session_errors}
