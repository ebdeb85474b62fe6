"""Only the holder ends its holding, and no stream is stranded (issue 18, findings 1 and 2).

Real ``python -m worker`` processes (the recorder handler, ``holdfast.fleet.recorder``) with the
local router runner (``python -m holdfast.runner``: router and sweeper) on DynamoDB Local, moto
SQS and the demo upstream: a forced release gives no second deliverer, our own session's strays
are taken back, and a stream owned by an owner with no session is released and delivered.
In process: an acquire that lands after the session was lost is released at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from holdfast.core.anchor import Anchor
from holdfast.core.model import Lease
from holdfast.core.nudge import URL_FRESH_MS
from holdfast.core.store import LeaseStore
from holdfast.fleet.recorder import RECORD_DIR_ENV, RECORDER_SPEC, Handled, read_records
from holdfast.worker.claims import Claim
from holdfast.worker.connection import Connection
from holdfast.worker.reconciler import Strays
from tests.conftest import TIMEOUT_SCALE
from tests.worker.conftest import (
    ROOT,
    Fleet,
    UpstreamThread,
    WorkerProc,
    async_wait_until,
    wait_until,
    worker_config,
)
from tests.worker.helpers import holdings_alone


class SessionLostDuringAcquire(LeaseStore):
    """The real store, whose acquire lands just as the worker's session is lost: the owner
    the worker acquires as changes (a new incarnation) while the write is in flight."""

    def __init__(self, *args: Any, session: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.session = session

    def acquire(self, conn_id: str, owner: str, *, anchor: Anchor | None = None) -> Lease:
        lease = super().acquire(conn_id, owner, anchor=anchor)
        self.session["owner"] = f"{owner.partition('#')[0]}#newincarnation"
        return lease


async def test_an_acquire_that_lands_after_the_session_was_lost_is_released(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """The stream acquired under the lost session's owner is released (unowned), never
    delivered and never left owned by the old incarnation (finding 2)."""
    conn = f"{unique_id}-lost"
    fleet.create(conn, upstream.url(conn))
    config = worker_config(fleet)
    session = {"owner": f"{config.worker_id}#oldincarnation"}
    alone = holdings_alone(fleet, config=config, owner=lambda: session["owner"],
                           store_class=SessionLostDuringAcquire,
                           store_kwargs={"session": session})
    holdings, rec = alone.holdings, alone.rec

    assert await holdings.claim(conn) is Claim.CLAIMED
    await async_wait_until(lambda: not holdings.streams, 5, "the stream handed back")
    await asyncio.gather(*holdings.tasks)
    item = fleet.item(conn)
    assert "lease_owner" not in item, item.get("lease_owner")
    assert item["lease_expires_at_ms"]["N"] == "0"  # claimable at once by a live session
    assert not rec.calls  # never delivered under the lost session
    assert holdings.counts["released"] == 1


async def test_a_stray_on_a_full_worker_is_released(
        fleet: Fleet, upstream: UpstreamThread, unique_id: str) -> None:
    """A stray of our own session that a full worker cannot hold is released (unowned, free
    for any worker), never left owned by us for its hour-long backstop (finding 2)."""
    conn = f"{unique_id}-full"
    config = dataclasses.replace(worker_config(fleet), max_connections=1)
    owner = f"{config.worker_id}#inc1"
    put_owned(fleet, conn, upstream.url(conn), owner, epoch=5)
    alone = holdings_alone(fleet, config=config, owner=lambda: owner,
                           streams={"held-elsewhere": cast(Connection, None)})  # slot taken
    holdings, sup = alone.holdings, alone.sup
    strays = Strays(sup.sweep_sessions, lambda: owner, holdings.claim, holdings.busy,
                    holdings.release_stray)
    await async_wait_until(lambda: conn in sup.sweep_sessions.owned_by(owner), 5,
                           "the stray in the owner index")
    assert await strays.once() == 0  # not taken: no room
    item = fleet.item(conn)
    assert "lease_owner" not in item, item.get("lease_owner")
    assert item["lease_expires_at_ms"]["N"] == "0"


# The sweeper's settings for these tests: sweep often, and no rebalancing (a move would be a
# handover of its own, muddling which worker a forced release handed a stream to).
RUNNER_ENV = {"HOLDFAST_SWEEP_INTERVAL_MS": "500", "HOLDFAST_SWEEP_RENUDGE_MS": "2000",
              "HOLDFAST_SWEEP_UNCLAIMED_GRACE_MS": "1000", "HOLDFAST_BALANCE": "off"}
TTL_S, SKEW_S = 3.0, 0.3  # the worker fleet's FAST timings (tests/worker/conftest.py)


@pytest.fixture
def router(fleet: Fleet, tmp_path: Path) -> Iterator[Path]:
    """The local runner (router on the table's stream records, and the sweeper) in a child
    process on this test's table and queue; its log file."""
    log_path = tmp_path / "runner.log"
    env = {**os.environ, **fleet.env, **RUNNER_ENV, "PYTHONUNBUFFERED": "1"}
    with log_path.open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "holdfast.runner"], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: proc.poll() is not None or b"runner reading" in log_path.read_bytes(),
                   30, "the router runner to start")
        assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
        yield log_path
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """Where the workers' recorder writes (conn_id, seq, worker, wall ms) per handled message."""
    return tmp_path / "handled"


def start_worker(spawn: Callable[..., WorkerProc], fleet: Fleet, recorded: Path, name: str,
                 **env: str) -> WorkerProc:
    """A worker process running the recorder, once it logged "worker started"."""
    w = spawn(fleet.env, name, HOLDFAST_HANDLER=RECORDER_SPEC, **{RECORD_DIR_ENV: str(recorded)},
              **env)
    wait_until(lambda: w.messages("worker started") or w.proc.poll() is not None, 20,
               f"worker {name} to start")
    assert w.proc.poll() is None, w.log_path.read_text(errors="replace")[-3000:]
    return w


def handled(recorded: Path, conn_id: str, worker: str | None = None) -> list[Handled]:
    return [h for h in read_records(recorded) if h.conn_id == conn_id
            and (worker is None or h.worker_id == worker)]


def owner_string(fleet: Fleet, worker_id: str) -> str:
    """``<worker id>#<incarnation>`` of the worker's current session (its session item)."""
    session = fleet.sessions().get(worker_id)
    assert session is not None
    return session.owner


def put_owned(fleet: Fleet, conn_id: str, url: str, owner: str, epoch: int) -> None:
    """A STARTED stream item already owned by ``owner``, its backstop an hour ahead."""
    now = int(time.time() * 1000)
    fleet.ddb.put_item(TableName=fleet.table, Item={
        "Pk": {"S": f"CONN#{conn_id}"}, "desired_state": {"S": "STARTED"}, "ws_url": {"S": url},
        "lease_owner": {"S": owner}, "lease_expires_at_ms": {"N": str(now + 3_600_000)},
        "lease_epoch": {"N": str(epoch)}, "status": {"S": "RUNNING"},
        "updated_at_ms": {"N": str(now)}})


def test_a_forced_release_gives_no_second_deliverer(
        fleet: Fleet, upstream: UpstreamThread, spawn: Callable[..., WorkerProc],
        router: Path, recorded: Path, unique_id: str) -> None:
    """Writing expiry 0 with the owner kept (the seed's release) makes the holder drain and
    release on a release order; another holding starts within about a second, and no worker
    delivers a stream while another still does (finding 1)."""
    conns = [f"{unique_id}-f{i}" for i in range(3)]
    for c in conns:
        fleet.create(c, upstream.url(c))
    # Worker a polls a nudge queue of its own, fed by hand: the router's nudges after the
    # forced release reach only b, so each stream changes worker (the handover where two
    # deliverers could overlap) instead of going back to a half of the time.
    a_queue = fleet.sqs.create_queue(QueueName=f"hf-{unique_id}-a")["QueueUrl"]
    # Checkpoints every 2 s: a holder that learnt of its loss only from a failed checkpoint
    # (the old code) would go on delivering for up to that long.
    slow_checkpoints = {"HOLDFAST_CHECKPOINT_SECONDS": "2"}
    a = start_worker(spawn, fleet, recorded, f"a-{unique_id}", HOLDFAST_QUEUE_URL=a_queue,
                     **slow_checkpoints)
    for c in conns:
        fleet.sqs.send_message(QueueUrl=a_queue, MessageBody=json.dumps(
            {"conn_id": c, "reason": "test", "epoch": None}))
    wait_until(lambda: all(len(handled(recorded, c, a.name)) >= 5 for c in conns), 20,
               "worker a to hold and deliver every stream")
    # The router's nudges of the new streams wait on the shared queue for b: received while
    # fresh, they carry the URL and b would connect before its claim (``worker.prestart``),
    # a brief second connection beside a's (by design for a new stream, not the handover
    # tested here; seen when a loaded machine's router sent them late).
    wait_until(lambda: fleet.queue_depth() >= len(conns), 10, "the new streams' nudges")
    time.sleep(URL_FRESH_MS / 1000 + 0.2)
    b = start_worker(spawn, fleet, recorded, f"b-{unique_id}", **slow_checkpoints)
    time.sleep(0.5)
    old = {c: fleet.item(c) for c in conns}
    assert all(i["lease_owner"]["S"].startswith(f"{a.name}#") for i in old.values())

    forced_ms = int(time.time() * 1000)
    for c in conns:  # the seed's release: expiry 0, owner left in place
        fleet.ddb.update_item(TableName=fleet.table, Key={"Pk": {"S": f"CONN#{c}"}},
                              UpdateExpression="SET lease_expires_at_ms = :zero",
                              ExpressionAttributeValues={":zero": {"N": "0"}})
    held_again_ms: dict[str, int] = {}

    def all_held_again() -> bool:
        for c in conns:
            item = fleet.item(c)
            if c not in held_again_ms and "lease_owner" in item and int(
                    item["lease_epoch"]["N"]) > int(old[c]["lease_epoch"]["N"]):
                held_again_ms[c] = int(time.time() * 1000)
        return len(held_again_ms) == len(conns)

    wait_until(all_held_again, 8, "every stream held again under a new epoch", interval=0.02)
    new_owner = {c: fleet.item(c)["lease_owner"]["S"].partition("#")[0] for c in conns}
    assert set(new_owner.values()) == {b.name}, new_owner
    wait_until(lambda: all(handled(recorded, c, b.name) for c in conns), 8,
               "every stream delivered again")
    time.sleep(1.0)  # a holder that had not stopped would show deliveries now
    for c in conns:
        last_a = max(h.wall_ms for h in handled(recorded, c, a.name))
        first_b = min(h.wall_ms for h in handled(recorded, c, b.name))
        print(f"{c}: held again {held_again_ms[c] - forced_ms} ms after the forced write, "
              f"delivered again after {first_b - forced_ms} ms (a's last delivery "
              f"{last_a - forced_ms} ms after it)")
        # The target is 1 s; measured 0.3-0.6 s on an idle 2-core box and up to 4 s at a load
        # average of 10: the bound only catches a stream left unowned, the print tells more.
        assert first_b - forced_ms <= 5_000 * TIMEOUT_SCALE
        assert last_a < first_b, f"{c}: a delivered until {last_a}, b from {first_b}"
    # The holder stopped on an order and released the streams itself, never lost them.
    ordered = {r.get("conn_id") for r in a.messages("release order: draining and releasing")}
    assert ordered >= set(conns)
    assert not a.messages("lease lost, closing at once")
    assert not a.messages("session lost, closing at once")
    assert upstream.server.connlog.overlaps() == []
    fleet.sqs.delete_queue(QueueUrl=a_queue)


def test_a_stray_of_our_own_session_is_taken_back(
        fleet: Fleet, upstream: UpstreamThread, spawn: Callable[..., WorkerProc],
        recorded: Path, unique_id: str) -> None:
    """A stream owned by the worker's own current owner string that it does not hold (an
    acquire whose answer was lost) is taken back by the strays pass under a higher epoch and
    delivered (finding 2)."""
    w = start_worker(spawn, fleet, recorded, f"w-{unique_id}")
    conn = f"{unique_id}-stray"
    put_owned(fleet, conn, upstream.url(conn), owner_string(fleet, w.name), epoch=5)
    t0 = time.monotonic()
    # The strays pass runs every 5 s (jittered by up to 25 %), then claim and connect.
    wait_until(lambda: handled(recorded, conn, w.name), 6.25 + 2, "the stray delivered")
    print(f"stray delivered again after {time.monotonic() - t0:.2f} s")
    item = fleet.item(conn)
    assert item["lease_owner"]["S"] == owner_string(fleet, w.name)
    assert int(item["lease_epoch"]["N"]) > 5


def test_a_stream_owned_by_an_owner_without_a_session_is_delivered(
        fleet: Fleet, upstream: UpstreamThread, spawn: Callable[..., WorkerProc],
        router: Path, recorded: Path, unique_id: str) -> None:
    """An item owned by a worker id with no session, its backstop an hour ahead, is released
    by the sweeper and delivered by a live worker within TTL + skew + a few seconds (finding
    2, "tried directly")."""
    w = start_worker(spawn, fleet, recorded, f"w-{unique_id}")
    conn = f"{unique_id}-ghost"
    put_owned(fleet, conn, upstream.url(conn), f"ghost-{unique_id}#abc123", epoch=7)
    t0 = time.monotonic()
    # The owner audit (every 2 s) releases an unknown owner's stream once it has seen it so
    # for TTL + skew; the router then nudges it and the worker claims and connects.
    wait_until(lambda: handled(recorded, conn, w.name), TTL_S + SKEW_S + 6,
               "the stranded stream delivered")
    print(f"stranded stream delivered after {time.monotonic() - t0:.2f} s")
    item = fleet.item(conn)
    assert item["lease_owner"]["S"] == owner_string(fleet, w.name)
    assert int(item["lease_epoch"]["N"]) > 7
