"""Measure the reactive path on the local AWS: INSERT -> nudge, expiry -> nudge, heartbeats.

    .venv/bin/python bench/router_latency.py [--inserts 50] [--expiries 20] [--out FILE]

Starts its own DynamoDB Local + moto SQS and an in-process local runner (stream reader, real
router handler, sweeper loop), then measures, as a worker would see it (long-polling the
queue):

- INSERT -> nudge received: one item at a time, ``--inserts`` times;
- burst: ``--inserts`` items created back to back, time until every nudge is received;
- expiry -> nudge: leases taken by a "dead" owner and never renewed, time from expiry (and
  from expiry + skew, when a challenger may acquire) to the sweeper's nudge;
- heartbeats: leases renewed many times; the router must not be invoked at all.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from holdfast.core.nudge import REASON_EXPIRED  # noqa: E402
from holdfast.core.store import LeaseStore  # noqa: E402
from holdfast.core.table import create_stream  # noqa: E402
from holdfast.localaws import LocalAws  # noqa: E402

URL = "wss://feeds.example.test/bench"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": pct(values, 50), "p90": pct(values, 90),
            "p99": pct(values, 99), "max": max(values), "mean": statistics.fmean(values)}


class Inbox:
    """Long-polls the queue in a thread and timestamps every nudge on arrival."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs, self.queue_url = sqs, queue_url
        self.arrived: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            resp = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                                            WaitTimeSeconds=1)
            now = time.time()
            msgs = resp.get("Messages", [])
            if msgs:
                self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(msgs)])
            with self.cond:
                for m in msgs:
                    body = json.loads(m["Body"])
                    self.arrived.setdefault(body["conn_id"], []).append((now, body))
                self.cond.notify_all()

    def wait_for(self, conn_id: str, timeout: float = 30, reason: str | None = None) -> float:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for at, body in self.arrived.get(conn_id, []):
                    if reason is None or body["reason"] == reason:
                        return at
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no nudge for {conn_id}")
                self.cond.wait(left)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inserts", type=int, default=50)
    parser.add_argument("--expiries", type=int, default=20)
    parser.add_argument("--lease-ms", type=int, default=2_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with LocalAws(backend="dynamodb-local") as aws:
        os.environ.update(aws.env())
        os.environ["POWERTOOLS_LOG_LEVEL"] = "WARNING"
        os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
        warnings.filterwarnings("ignore", "No application metrics to publish")
        skew = int(os.environ.setdefault("HOLDFAST_SKEW_MS", "1000"))
        from holdfast.core.aws import dynamodb_client, sqs_client
        from holdfast.runner.config import RunnerConfig
        from holdfast.runner.runner import Runner

        ddb, sqs = dynamodb_client(), sqs_client()
        runner = Runner(RunnerConfig.from_env())
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        runner.ready.wait(30)
        inbox = Inbox(sqs, aws.queue_url)
        results: dict[str, Any] = {"skew_ms": skew, "lease_ms": args.lease_ms}
        try:
            results.update(measure(args, aws.table, ddb, inbox, runner=runner, skew=skew))
        finally:
            runner.stop.set()
            inbox.stop.set()
            thread.join(10)
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
    return 0


def measure(args: argparse.Namespace, table: str, ddb: Any, inbox: Inbox, *, runner: Any,
            skew: int) -> dict[str, Any]:
    # Warm-up: the router's first invocation builds its clients (a Lambda cold start).
    create_stream(ddb, table, "warmup", URL)
    inbox.wait_for("warmup")
    out: dict[str, Any] = {"insert_to_nudge_ms": summary(inserts(args.inserts, table, ddb,
                                                                 inbox))}
    out["burst"] = burst(args.inserts, table, ddb, inbox)
    out.update(expiries(args, table, ddb, inbox, skew))
    out["heartbeats"] = heartbeats(table, ddb, inbox, runner, skew)
    out["runner"] = runner.stats.summary()
    out["router_invocation_ms"] = summary(runner.stats.esm.durations_ms)
    return out


def inserts(n: int, table: str, ddb: Any, inbox: Inbox) -> list[float]:
    """One at a time: write, then wait for its nudge."""
    latencies = []
    for i in range(n):
        conn = f"ins-{i}"
        t0 = time.time()
        create_stream(ddb, table, conn, URL)
        latencies.append((inbox.wait_for(conn) - t0) * 1000)
    return latencies


def burst(n: int, table: str, ddb: Any, inbox: Inbox) -> dict[str, float]:
    """Back to back writes, then the time until the last nudge arrived."""
    t0 = time.time()
    conns = [f"burst-{i}" for i in range(n)]
    for conn in conns:
        create_stream(ddb, table, conn, URL)
    written = time.time()
    last = max(inbox.wait_for(c) for c in conns)
    return {"n": n, "write_s": written - t0,
            "last_nudge_after_last_write_ms": (last - written) * 1000, "total_s": last - t0}


def expiries(args: argparse.Namespace, table: str, ddb: Any, inbox: Inbox,
             skew: int) -> dict[str, Any]:
    """Leases of a dead owner, expiries spread over time; the sweeper must nudge each."""
    dead = LeaseStore(ddb, table, lease_ms=args.lease_ms, skew_ms=skew)
    leases = []
    for i in range(args.expiries):
        conn = f"exp-{i}"
        create_stream(ddb, table, conn, URL)
        inbox.wait_for(conn, reason="inserted")
        leases.append(dead.acquire(conn, "dead-worker"))
        time.sleep(0.137)  # spread the expiries over the sweep interval
    after_expiry, after_claimable = [], []
    for lease in leases:
        at = inbox.wait_for(lease.conn_id, timeout=args.lease_ms / 1000 + 10, reason=REASON_EXPIRED)
        after_expiry.append(at * 1000 - lease.expires_at_ms)
        after_claimable.append(at * 1000 - lease.expires_at_ms - skew)
    return {"expiry_to_nudge_ms": summary(after_expiry),
            "claimable_to_nudge_ms": summary(after_claimable)}


def heartbeats(table: str, ddb: Any, inbox: Inbox, runner: Any, skew: int) -> dict[str, int]:
    """20 acquisitions and 200 renewals: read from the stream, never delivered."""
    live = LeaseStore(ddb, table, lease_ms=60_000, skew_ms=skew)
    for i in range(20):
        create_stream(ddb, table, f"hb-{i}", URL)
        inbox.wait_for(f"hb-{i}")
    time.sleep(0.5)
    before_inv, before_read = runner.stats.esm.invocations, runner.stats.records_read
    held = [live.acquire(f"hb-{i}", "live-worker") for i in range(20)]
    for round_ in range(10):
        held = [live.renew(lease, handled_seq=round_) for lease in held]
    time.sleep(1.0)
    return {"writes": 20 + 20 * 10, "records_read": runner.stats.records_read - before_read,
            "router_invocations": runner.stats.esm.invocations - before_inv}


if __name__ == "__main__":
    sys.exit(main())
