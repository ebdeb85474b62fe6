"""Worker test fixtures: a private table and queue per test, a demo upstream, worker processes.

Worker processes run a reconcile sweep over the whole table and poll a whole queue, so tests
that share one table or queue would steal each other's streams: each test gets its own (cheap
on DynamoDB Local and moto), on the session's shared servers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from holdfast.core.names import ENV_ORDERS_QUEUE_PREFIX
from holdfast.core.nudge import REASON_HANDOFF, REASON_MOVED, Nudge
from holdfast.core.orders import order_queue_url, prefix_for
from holdfast.core.schema import session_table_definition, table_definition
from holdfast.core.sessions import SessionStore, sweep_sessions
from holdfast.core.table import create_stream
from holdfast.core.urls import ENV_ALLOWED_HOSTS, LOOPBACK_ALLOW_LIST, parse_allow_list
from holdfast.localaws import LocalAws
from holdfast.upstream import UpstreamServer
from tests.conftest import TIMEOUT_SCALE, client_for

ROOT = Path(__file__).resolve().parents[2]

# Short lease timings: fencing at lease - skew - margin = 3000 - 300 - 300 = 2.4 s.
FAST = {
    "HOLDFAST_LEASE_SECONDS": "3",
    "HOLDFAST_HEARTBEAT_SECONDS": "0.5",
    "HOLDFAST_CHECKPOINT_SECONDS": "0.5",
    "HOLDFAST_SKEW_MS": "300",
    "HOLDFAST_MARGIN_MS": "300",
    "HOLDFAST_POLL_SECONDS": "1",
    "HOLDFAST_RECONCILE_SECONDS": "0",
    "HOLDFAST_HEALTH_PORT": "0",
    "HOLDFAST_METRICS_SECONDS": "30",
    "HOLDFAST_SHUTDOWN_SECONDS": "8",
    "HOLDFAST_RECONNECT_BASE_SECONDS": "0.05",
    "HOLDFAST_RECONNECT_CAP_SECONDS": "0.2",
    "HOLDFAST_OPEN_TIMEOUT_SECONDS": "2",
    # The demo upstream listens on 127.0.0.1: loopback must be allowed explicitly.
    ENV_ALLOWED_HOSTS: LOOPBACK_ALLOW_LIST,
}
LOOPBACK_POLICY = parse_allow_list(LOOPBACK_ALLOW_LIST)


@dataclass
class Fleet:
    """One test's table + queue on the shared local AWS, and the env a worker needs."""

    aws: LocalAws
    table: str
    queue_url: str
    env: dict[str, str]
    ddb: Any
    sqs: Any

    @property
    def session_table(self) -> str:
        return self.env["HOLDFAST_SESSION_TABLE"]

    def sessions(self) -> SessionStore:
        """The session store of this fleet, at the fleet's TTL and skew."""
        return SessionStore(self.ddb, self.session_table, self.table,
                            ttl_ms=int(float(self.env["HOLDFAST_LEASE_SECONDS"]) * 1000),
                            skew_ms=int(self.env["HOLDFAST_SKEW_MS"]))

    def create(self, conn_id: str, ws_url: str) -> None:
        assert create_stream(self.ddb, self.table, conn_id, ws_url)

    def nudge(self, conn_id: str, body: str | None = None) -> None:
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body or json.dumps(
            {"conn_id": conn_id, "reason": "test", "epoch": None}))

    def item(self, conn_id: str) -> dict[str, Any]:
        resp = self.ddb.get_item(TableName=self.table, Key={"Pk": {"S": f"CONN#{conn_id}"}},
                                 ConsistentRead=True)
        return dict(resp.get("Item") or {})

    def queue_depth(self) -> int:
        attrs = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"])


def make_fleet(aws: LocalAws, tag: str) -> Fleet:
    ddb, sqs = client_for(aws, "dynamodb"), client_for(aws, "sqs")
    table = f"hf-{tag}"
    ddb.create_table(**table_definition(table))
    ddb.create_table(**session_table_definition(f"{table}-sessions"))
    queue_url = sqs.create_queue(QueueName=f"hf-{tag}", Attributes={
        "VisibilityTimeout": "30"})["QueueUrl"]
    env = {**aws.env(), "HOLDFAST_TABLE": table, "HOLDFAST_SESSION_TABLE": f"{table}-sessions",
           "HOLDFAST_QUEUE_URL": queue_url, ENV_ORDERS_QUEUE_PREFIX: prefix_for(table), **FAST}
    if aws.backend == "dynamodb-local":
        # DynamoDB Local compiles its PartiQL path on first use (can take > 1 s): warm it up so
        # a worker's first batched renewal is not fenced by the emulator's warm-up.
        ddb.batch_execute_statement(Statements=[{
            "Statement": f'SELECT * FROM "{table}" WHERE Pk = ?',
            "Parameters": [{"S": "CONN#x"}]}])
    return Fleet(aws, table, queue_url, env, ddb, sqs)


@pytest.fixture
def fleet(ddb_local: LocalAws, unique_id: str) -> Iterator[Fleet]:
    """A private lease table and nudge queue on DynamoDB Local + moto SQS."""
    f = make_fleet(ddb_local, unique_id)
    yield f
    f.ddb.delete_table(TableName=f.table)
    f.ddb.delete_table(TableName=f.session_table)
    f.sqs.delete_queue(QueueUrl=f.queue_url)


class UpstreamThread:
    """The demo upstream on its own event loop in a thread, usable from sync and async tests."""

    def __init__(self, rate: float) -> None:
        self.server = UpstreamServer(rate=rate)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def url(self, stream_id: str, kind: str = "s") -> str:
        return self.server.url(stream_id, kind)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def upstream() -> Iterator[UpstreamThread]:
    """A demo upstream at 20 messages/s per stream."""
    up = UpstreamThread(rate=20)
    yield up
    up.stop()


@dataclass
class WorkerProc:
    """A real ``python -m worker`` process whose JSON log lines and handled messages we read."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    record_path: Path
    _log: Any = field(repr=False, default=None)
    _records: list[dict[str, Any]] = field(repr=False, default_factory=list)
    _read_to: int = field(repr=False, default=0)

    def logs(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out

    def messages(self, text: str) -> list[dict[str, Any]]:
        return [r for r in self.logs() if r.get("message") == text]

    def handled(self) -> list[dict[str, Any]]:
        """Every complete record so far. Each call parses only what was appended since the
        last: re-parsing 20,000 records every 50 ms held the GIL from the upstream thread in
        this process until, on a loaded CI machine, handshakes timed out."""
        if not self.record_path.exists():
            return []
        with self.record_path.open("rb") as f:
            f.seek(self._read_to)
            new = f.read()
        # The worker may be mid-write: only lines that end in a newline are complete records.
        complete = new.rpartition(b"\n")[0]
        if complete:
            self._read_to += len(complete) + 1
            self._records += [json.loads(x) for x in complete.splitlines() if x.strip()]
        return list(self._records)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout * TIMEOUT_SCALE)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(10)
        if self._log:
            self._log.close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., WorkerProc]]:
    """Start worker processes (killed at the end of the test if still running)."""
    procs: list[WorkerProc] = []

    def start(env: dict[str, str], name: str | None = None, **extra: str) -> WorkerProc:
        name = name or f"w{len(procs)}-{uuid.uuid4().hex[:4]}"
        log_path, record_path = tmp_path / f"{name}.log", tmp_path / f"{name}.jsonl"
        full = {**os.environ, **env, "HOLDFAST_WORKER_ID": name,
                "HOLDFAST_HANDLER": "tests.worker.recording_handler:record",
                "HOLDFAST_TEST_RECORD": str(record_path), "PYTHONUNBUFFERED": "1", **extra}
        log = log_path.open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "holdfast.worker"], cwd=ROOT, env=full,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wp = WorkerProc(name, proc, log_path, record_path, log)
        procs.append(wp)
        return wp

    yield start
    for wp in procs:
        wp.stop()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.05) -> Any:
    """Poll ``predicate`` until truthy; fail the test naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def async_wait_until(predicate: Callable[[], Any], timeout: float,  # noqa: ASYNC109
                           what: str, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def seqs_by_stream(records: list[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in records:
        if r.get("seq") is not None:
            out.setdefault(r["conn_id"], []).append(int(r["seq"]))
    return out


def missing_seqs(seqs: list[int]) -> list[int]:
    """Seqs absent between the first and the last one handled."""
    have = set(seqs)
    return [s for s in range(min(have), max(have) + 1) if s not in have] if have else []


def worker_config(fleet: Fleet, **overrides: str) -> Any:
    """A ``WorkerConfig`` for an in-process worker on ``fleet`` (env plus ``overrides``)."""
    from holdfast.worker.config import load_config

    env = {**fleet.env, "HOLDFAST_WORKER_ID": f"inproc-{uuid.uuid4().hex[:6]}", **overrides}
    return load_config(env)


class RouterSim:
    """Stands in for the router Lambda (built elsewhere): nudges released STARTED streams.

    Polls the table every ``period_s`` and sends one nudge per (stream, update) that is STARTED,
    unowned and claimable now: the same decision the router makes from a stream record.
    """

    def __init__(self, fleet: Fleet, period_s: float = 0.05) -> None:
        self.fleet, self.period_s = fleet, period_s
        self.orders_prefix = prefix_for(fleet.table)  # the workers' (``worker_env``)
        self.sent: set[tuple[str, ...]] = set()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        ddb = client_for(self.fleet.aws, "dynamodb")
        sessions = self.fleet.sessions()
        while not self.stop_event.wait(self.period_s):
            # The sweeper's session half: silent sessions are declared dead, their streams
            # released (the scan below then nudges them, as the router would).
            sweep_sessions(sessions, int(time.time() * 1000), sessions.skew_ms,
                           logging.getLogger("tests.routersim"))
            now = time.time() * 1000
            # Every page: the table is shared by the tests of this process, and one page (1 MB)
            # left later items un-nudged once earlier tests had filled it (seen under xdist).
            pages = ddb.get_paginator("scan").paginate(TableName=self.fleet.table)
            for raw in (item for page in pages for item in page.get("Items", [])):
                conn = raw["Pk"]["S"].removeprefix("CONN#")
                owner = raw.get("lease_owner")
                exp = int(raw.get("lease_expires_at_ms", {"N": "0"})["N"])
                updated = raw.get("updated_at_ms", {"N": "0"})["N"]
                key = (conn, updated)
                successor = raw.get("successor", {}).get("S")
                if (raw["desired_state"]["S"] == "STARTED" and not owner and successor
                        and (*key, successor) not in self.sent):
                    # A handoff: the successor is told on its order queue at once (the
                    # shared nudge below waits for the hold's end, as the router's).
                    self.sent.add((*key, successor))
                    try:
                        self.fleet.sqs.send_message(
                            QueueUrl=order_queue_url(self.fleet.queue_url, self.orders_prefix,
                                                     successor),
                            MessageBody=Nudge(conn, REASON_HANDOFF, to=successor).body())
                    except ClientError:  # no such queue: the router nudges the shared one now
                        self.fleet.nudge(conn, Nudge(conn, REASON_HANDOFF).body())
                    continue
                if raw["desired_state"]["S"] == "STARTED" and not owner and exp <= now \
                        and key not in self.sent:
                    self.sent.add(key)
                    # The router's reason: a release that stamped moved_at_ms is a move.
                    moved = raw.get("moved_at_ms", {}).get("N") == updated
                    self.fleet.nudge(conn, json.dumps({
                        "conn_id": conn, "reason": REASON_MOVED if moved else "released",
                        "epoch": None}))

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(5)
